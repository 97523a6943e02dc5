# R's printed summary() of the two models the REPL's footer is compared with
# (tests/suites/r_print.rs). Run from the repository root:
#   Rscript testdata/reference/summary_print.R > testdata/reference/summary_print.txt
files <- sort(Sys.glob("testdata/clinic/*.csv"))
clinic <- do.call(rbind, lapply(files, read.csv))
clinic$age2 <- 2 * clinic$age
fit <- glm(event ~ age + bmi + smoker, family = binomial, data = clinic)
print(summary(fit))
fit <- lm(systolic ~ age + age2 + bmi + smoker, data = clinic)
print(summary(fit))
