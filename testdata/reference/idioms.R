# Reference values for R's formula idioms and robust standard errors in
# fedsql (issue 58, items 2 and 3): offset(log(x)), factor(), as.factor(),
# relevel(), logical and text binomial responses, quasi families, the
# negative binomial (MASS), lm with weights, and sandwich's vcovHC /
# vcovCL. Run from the repository root:
#
#     Rscript testdata/reference/idioms.R
#
# R 4.2.2 with MASS and sandwich (versions in VERSIONS_R.txt).
# Deterministic (a fixed seed); rewrites idioms.csv and the idioms_*.csv
# outputs byte for byte. Terms keep R's own names (fedsql's names=r).

suppressPackageStartupMessages({ library(MASS); library(sandwich) })
options(stringsAsFactors = FALSE)
out_dir <- "testdata/reference"
num <- function(x) ifelse(is.na(x), "", sprintf("%.17g", x))

# --- The data: 400 patients of a three-arm trial -------------------------
set.seed(58)
n <- 400
d <- data.frame(
  id = seq_len(n),
  treatment = sample(c("placebo", "drugA", "drugB"), n, TRUE),
  sex = sample(c("F", "M"), n, TRUE),
  age = round(runif(n, 30, 80), 1),
  dose = sample(1:3, n, TRUE),
  clinic = paste0("c", sample(1:12, n, TRUE)),
  followup = round(rexp(n, 1 / 3) + 0.1, 3),
  w = round(runif(n, 0.5, 2), 2)
)
eta <- -1 + 0.3 * (d$treatment == "drugA") - 0.5 * (d$treatment == "drugB") +
  0.01 * d$age + 0.2 * (d$sex == "M") + log(d$followup)
d$events <- rnbinom(n, size = 2, mu = exp(eta))
p <- plogis(-2 + 0.03 * d$age + 0.5 * (d$sex == "M") - 0.4 * (d$treatment == "drugB"))
d$responded <- runif(n) < p
d$outcome <- ifelse(runif(n) < plogis(-1 + 0.02 * d$age + 0.6 * (d$treatment == "placebo")), "yes", "no")
d$y <- round(100 + 0.5 * d$age + 3 * (d$sex == "M") +
               rnorm(n, 0, 5 * (1 + (d$treatment == "drugB"))), 3)
written <- d
# logical columns as R writes them: TRUE / FALSE
write.csv(written, file.path(out_dir, "idioms.csv"), row.names = FALSE, quote = FALSE)
d <- read.csv(file.path(out_dir, "idioms.csv"))
stopifnot(is.logical(d$responded))

# The federation of the tests: sites of 1, 0, 150, 120 and the rest.
sizes <- c(1, 0, 150, 120, n - 271)
d$site <- rep(paste0("site", 0:4), sizes)

write_coef <- function(fit, name, vc = vcov(fit), df = NULL) {
  est <- coef(fit)
  se <- sqrt(diag(vc))
  out <- data.frame(term = names(est), estimate = num(est), std_error = num(se))
  write.csv(out, file.path(out_dir, paste0("idioms_", name, ".coef.csv")),
            row.names = FALSE, quote = TRUE)
}
write_vcov <- function(v, name) {
  terms <- rownames(v)
  rows <- expand.grid(j = seq_along(terms), i = seq_along(terms))
  df <- data.frame(term1 = terms[rows$i], term2 = terms[rows$j],
                   covariance = num(v[cbind(rows$i, rows$j)]))
  write.csv(df, file.path(out_dir, paste0("idioms_", name, ".vcov.csv")),
            row.names = FALSE, quote = TRUE)
}
write_stats <- function(fit, name, extra = list()) {
  s <- summary(fit)
  out <- c(list(deviance = fit$deviance, null_deviance = fit$null.deviance,
                dispersion = s$dispersion, aic = fit$aic,
                df_residual = fit$df.residual), extra)
  out <- data.frame(name = names(out), value = num(unlist(out)))
  write.csv(out, file.path(out_dir, paste0("idioms_", name, ".stats.csv")),
            row.names = FALSE, quote = TRUE)
}
# Coefficients with summary's standard errors, statistics and p-values.
write_summary <- function(fit, name) {
  co <- coef(summary(fit))
  out <- data.frame(term = rownames(co), estimate = num(co[, 1]), std_error = num(co[, 2]),
                    statistic = num(co[, 3]), p_value = num(co[, 4]))
  write.csv(out, file.path(out_dir, paste0("idioms_", name, ".coef.csv")),
            row.names = FALSE, quote = TRUE)
}

# --- Item 2: formula idioms ----------------------------------------------
rate <- glm(events ~ treatment + age + offset(log(followup)), family = poisson, data = d)
write_summary(rate, "poisson_offset"); write_stats(rate, "poisson_offset")

logical <- glm(responded ~ factor(sex) + age, family = binomial, data = d)
write_summary(logical, "logical_factor"); write_stats(logical, "logical_factor")

# R's relevel() needs a factor: the text columns are made factors first.
text <- glm(outcome ~ relevel(treatment, "placebo") + age, family = binomial,
            data = transform(d, outcome = factor(outcome), treatment = factor(treatment)))
write_summary(text, "text_relevel"); write_stats(text, "text_relevel")

dose <- glm(events ~ as.factor(dose) + age * sex + offset(log(followup)),
            family = poisson, data = d)
write_summary(dose, "as_factor"); write_stats(dose, "as_factor")

qp <- glm(events ~ treatment + age + offset(log(followup)), family = quasipoisson, data = d)
write_summary(qp, "quasipoisson"); write_stats(qp, "quasipoisson")

qb <- glm(responded ~ sex + age, family = quasibinomial, data = d)
write_summary(qb, "quasibinomial"); write_stats(qb, "quasibinomial")

nb2 <- glm(events ~ treatment + age + offset(log(followup)),
           family = negative.binomial(2), data = d)
write_summary(nb2, "negbin_theta2"); write_stats(nb2, "negbin_theta2")

nb <- glm.nb(events ~ treatment + age + offset(log(followup)), data = d)
write_summary(nb, "glm_nb")
write_stats(nb, "glm_nb", list(theta = nb$theta, se_theta = nb$SE.theta,
                               twologlik = nb$twologlik))

wlm <- lm(y ~ age + sex + treatment, weights = w, data = d)
write_summary(wlm, "lm_weights")
ws <- summary(wlm)
out <- data.frame(name = c("sigma", "r_squared", "adj_r_squared", "f_statistic", "log_likelihood", "aic"),
                  value = num(c(ws$sigma, ws$r.squared, ws$adj.r.squared, ws$fstatistic[1],
                                as.numeric(logLik(wlm)), AIC(wlm))))
write.csv(out, file.path(out_dir, "idioms_lm_weights.stats.csv"), row.names = FALSE, quote = TRUE)

# --- Item 3: robust standard errors ---------------------------------------
ols <- lm(y ~ age + sex + treatment, data = d)
pois <- glm(events ~ treatment + age + offset(log(followup)), family = poisson, data = d)
logit <- glm(responded ~ sex + age + treatment, family = binomial, data = d)
for (type in c("HC0", "HC1", "HC2", "HC3")) {
  write_vcov(vcovHC(ols, type = type), paste0("lm_", type))
  write_vcov(vcovHC(pois, type = type), paste0("poisson_", type))
  write_vcov(vcovHC(logit, type = type), paste0("logit_", type))
}
write_vcov(vcovHC(wlm, type = "HC3"), "lm_weights_HC3")
for (by in c("site", "clinic")) {
  write_vcov(vcovCL(ols, cluster = d[[by]]), paste0("lm_cluster_", by))
  write_vcov(vcovCL(pois, cluster = d[[by]]), paste0("poisson_cluster_", by))
  write_vcov(vcovCL(logit, cluster = d[[by]]), paste0("logit_cluster_", by))
}
