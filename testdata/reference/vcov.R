# Reference covariance matrices of the estimates for fedsql's lm_vcov and
# glm_vcov, computed with R's own vcov() on the models the lm and glm tests
# fit, and written in the long form fedsql returns (term1, term2,
# covariance; NA empty). Run from the repository root:
#
#     Rscript testdata/reference/vcov.R
#
# R 4.2.2, package stats only. Deterministic; rewrites the files byte for
# byte. Term names are renamed to patsy's (fedsql's) spelling: `C(g)b`
# becomes `C(g)[T.b]`, `psi` stays `psi`.

options(stringsAsFactors = FALSE)
out_dir <- "testdata/reference"
read <- function(name) read.csv(file.path(out_dir, paste0(name, ".csv")), na.strings = c("", "NA"))

num <- function(x) ifelse(is.na(x), "", sprintf("%.17g", x))

write_vcov <- function(fit, file, rename = identity) {
  v <- vcov(fit, complete = TRUE)
  terms <- rename(rownames(v))
  rows <- expand.grid(j = seq_along(terms), i = seq_along(terms))
  df <- data.frame(term1 = terms[rows$i], term2 = terms[rows$j],
                   covariance = num(v[cbind(rows$i, rows$j)]))
  write.csv(df, file.path(out_dir, file), row.names = FALSE, quote = FALSE, na = "")
}

# C(g)b -> C(g)[T.b], x1:C(g)b -> x1:C(g)[T.b]
patsy <- function(terms) sub("(C\\([a-z_]+\\))([^:]+)$", "\\1[T.\\2]", terms)

spector <- read("spector")
write_vcov(glm(grade ~ gpa + tuce + psi, family = binomial, data = spector),
           "spector_logit.vcov.csv")

cpunish <- read("cpunish")
write_vcov(glm(executions ~ income + perpoverty + perblack + ln_vc100k96 + south + degree,
               family = poisson, data = cpunish),
           "cpunish_poisson.vcov.csv")

scotland <- read("scotland")
write_vcov(glm(yes ~ coutax + unempf + mor + act + gdp + age + coutax_femaleunemp,
               family = Gamma(link = "log"), data = scotland),
           "scotland_gamma.vcov.csv")

synthetic_poisson <- read("synthetic_poisson")
synthetic_poisson$g <- factor(synthetic_poisson$g)
write_vcov(glm(y ~ x1 + x2 + C(g) + offset(offset_log), family = poisson,
               data = synthetic_poisson),
           "synthetic_poisson.vcov.csv", patsy)

longley <- read("longley")
write_vcov(lm(totemp ~ gnpdefl + gnp + unemp + armed + pop + year, data = longley),
           "longley_lm.vcov.csv")

synthetic_lm <- read("synthetic_lm")
synthetic_lm$grp <- factor(synthetic_lm$grp)
write_vcov(lm(y ~ x1 + x2 + C(grp) + x1:C(grp), data = synthetic_lm),
           "synthetic_lm.vcov.csv", patsy)
# x3 is aliased (x1 + x2): its row and column are NA, as vcov(complete = TRUE) gives.
write_vcov(lm(y ~ x1 + x2 + x3, data = synthetic_lm),
           "synthetic_lm_aliased.vcov.csv")
