# R's printed summary() of the two models the REPL's footer is compared with
# (tests/suites/output.rs). Run from the repository root:
#   Rscript testdata/reference/summary_print.R > testdata/reference/summary_print.txt
# Empty fields are NA (NULL in fedsql), so both fits delete rows; x3 = x1 + x2
# makes x3 aliased in the lm.
synthetic_poisson <- read.csv("testdata/reference/synthetic_poisson.csv")
fit <- glm(y ~ x1 + x2, family = poisson, data = synthetic_poisson)
print(summary(fit))
synthetic_lm <- read.csv("testdata/reference/synthetic_lm.csv")
fit <- lm(y ~ x1 + x2 + x3, data = synthetic_lm)
print(summary(fit))
