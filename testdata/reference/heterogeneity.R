# Reference values for fedsql's between-site heterogeneity functions:
# the meta-analyses of per-site fits (lm_meta, glm_meta, coxph_meta) against
# metafor::rma on R's own per-site lm / glm / coxph estimates, and the
# linear mixed models (lmm*) against lme4::lmer. Run from the repository
# root:
#
#     Rscript testdata/reference/heterogeneity.R
#
# R 4.2.2, metafor 3.8.1, lme4 1.1.31, survival 3.5.3 (Debian packages
# r-cran-metafor, r-cran-lme4, r-cran-survival). Deterministic (fixed seed);
# rewrites the files byte for byte.
#
# Data: hetero.csv, 7 sites of unbalanced sizes (60, 150, 35, 90, 220, 45,
# 120 rows) with real between-site heterogeneity: each site has its own
# intercept and its own slope of x1 (and wards nested within it with their
# own intercepts). The analyses with k = 1, 3 and 7 sites use the first k
# sites (s1; s1-s3; s1-s7).
#
# metafor is run to convergence (control = list(threshold = 1e-14, tol =
# 1e-15, maxiter = 10000)): its defaults stop REML's Fisher scoring when a
# step is below 1e-5 and Paule-Mandel's uniroot at 1e-4, which moves tau^2
# by ~1e-5 relative (hetero_meta_defaults.csv keeps those values too).
#
# Floats as %.17g, NA empty.

suppressMessages({
  library(metafor)
  library(survival)
  library(lme4)
})
options(stringsAsFactors = FALSE)
out_dir <- "testdata/reference"
num <- function(x) ifelse(is.na(x), "", sprintf("%.17g", x))
write_rows <- function(df, file) {
  for (col in names(df)) if (is.numeric(df[[col]])) df[[col]] <- num(df[[col]])
  write.csv(df, file.path(out_dir, file), row.names = FALSE, quote = FALSE, na = "")
}

# --- data -------------------------------------------------------------------

set.seed(20261129)
sizes <- c(60, 150, 35, 90, 220, 45, 120)
rows <- list()
for (j in seq_along(sizes)) {
  n <- sizes[j]
  site <- paste0("s", j)
  a <- rnorm(1, 0, 1.5)           # the site's intercept shift
  b <- rnorm(1, 0, 0.5)           # the site's shift of the x1 slope
  wards <- paste0(site, "_w", seq_len(2 + j %% 3))
  ward <- sample(wards, n, replace = TRUE)
  ward_effect <- setNames(rnorm(length(wards), 0, 1), wards)[ward]
  x1 <- round(rnorm(n, 50, 10), 2)
  x2 <- round(runif(n, 0, 5), 3)
  z1 <- (x1 - 50) / 10
  y <- round(10 + a + (0.8 + b) * z1 - 0.5 * x2 + ward_effect + rnorm(n, 0, 2), 4)
  eta <- -0.5 + a / 2 + (0.6 + b) * z1 - 0.3 * x2
  event <- rbinom(n, 1, plogis(eta))
  rate <- exp(-3 + 0.5 * a + (0.4 + b / 2) * z1 + 0.3 * x2)
  t_event <- rexp(n, rate)
  t_censor <- runif(n, 0, 60)
  time <- round(pmin(t_event, t_censor), 2) + 0.01
  status <- as.integer(t_event <= t_censor)
  rows[[j]] <- data.frame(site, ward, y, x1, x2, event, time, status)
}
hetero <- do.call(rbind, rows)
write.csv(hetero, file.path(out_dir, "hetero.csv"), row.names = FALSE, quote = FALSE)
hetero <- read.csv(file.path(out_dir, "hetero.csv"))
sites_of <- function(k) hetero[hetero$site %in% paste0("s", seq_len(k)), ]

# --- meta-analyses -----------------------------------------------------------

tight <- list(threshold = 1e-14, tol = 1e-15, maxiter = 10000)

per_site <- function(model, data) {
  lapply(split(data, factor(data$site, levels = unique(data$site))), function(d) {
    fit <- switch(model,
      lm = lm(y ~ x1 + x2, data = d),
      glm = glm(event ~ x1 + x2, family = binomial, data = d),
      coxph = coxph(Surv(time, status) ~ x1 + x2, data = d, ties = "efron")
    )
    co <- summary(fit)$coefficients
    se <- if (model == "coxph") co[, "se(coef)"] else co[, 2]
    list(site = d$site[1], term = rownames(co), estimate = co[, 1], se = se)
  })
}

fedsql_term <- function(term) term

meta_rows <- function(id, model, k, method, test, control) {
  fits <- per_site(model, sites_of(k))
  out <- list()
  for (term in fits[[1]]$term) {
    yi <- sapply(fits, function(f) f$estimate[[term]])
    sei <- sapply(fits, function(f) f$se[[term]])
    site <- sapply(fits, function(f) f$site)
    main <- rma(yi, sei = sei, method = method, test = test, control = control)
    fe <- rma(yi, sei = sei, method = "FE", test = test)
    w <- weights(main)
    z <- qnorm(0.975)
    out[[length(out) + 1]] <- data.frame(
      id = id, term = fedsql_term(term), level = "site", site = site,
      estimate = yi, std_error = sei, statistic = yi / sei,
      p_value = 2 * pnorm(-abs(yi / sei)), conf_low = yi - z * sei,
      conf_high = yi + z * sei, weight = unname(w), tau2 = NA, i2 = NA,
      q = NA, q_df = NA, q_p_value = NA
    )
    pooled <- function(level, r) data.frame(
      id = id, term = fedsql_term(term), level = level, site = "",
      estimate = r$b[1], std_error = r$se, statistic = r$zval, p_value = r$pval,
      conf_low = r$ci.lb, conf_high = r$ci.ub, weight = 100, tau2 = r$tau2,
      i2 = r$I2, q = r$QE, q_df = r$k - 1, q_p_value = r$QEp
    )
    out[[length(out) + 1]] <- pooled("fixed", fe)
    if (method != "FE") out[[length(out) + 1]] <- pooled("random", main)
  }
  do.call(rbind, out)
}

cases <- list(
  list("lm_k1_reml", "lm", 1, "REML", "z"),
  list("lm_k3_reml", "lm", 3, "REML", "z"),
  list("lm_k7_reml", "lm", 7, "REML", "z"),
  list("lm_k7_dl", "lm", 7, "DL", "z"),
  list("lm_k7_pm", "lm", 7, "PM", "z"),
  list("lm_k7_fe", "lm", 7, "FE", "z"),
  list("lm_k7_reml_knha", "lm", 7, "REML", "knha"),
  list("glm_k3_reml", "glm", 3, "REML", "z"),
  list("glm_k7_reml", "glm", 7, "REML", "z"),
  list("glm_k7_dl_knha", "glm", 7, "DL", "knha"),
  list("coxph_k3_reml", "coxph", 3, "REML", "z"),
  list("coxph_k7_reml", "coxph", 7, "REML", "z"),
  list("coxph_k7_pm", "coxph", 7, "PM", "z")
)
run_cases <- function(control) do.call(rbind, lapply(cases, function(c) {
  suppressWarnings(meta_rows(c[[1]], c[[2]], c[[3]], c[[4]], c[[5]], control))
}))
write_rows(run_cases(tight), "hetero_meta.csv")
write_rows(run_cases(list()), "hetero_meta_defaults.csv")

# The printout of one analysis, for the guide.
fits <- per_site("lm", sites_of(7))
yi <- sapply(fits, function(f) f$estimate[["x1"]])
sei <- sapply(fits, function(f) f$se[["x1"]])
sink(file.path(out_dir, "hetero_meta_print.txt"))
print(summary(rma(yi, sei = sei, method = "REML")))
sink()

# --- the guide's worked examples (docs/guide/heterogeneity.md) ---------------

read_sites <- function(folder) lapply(sort(list.files(folder, full.names = TRUE)), read.csv)
clinic_sites <- lapply(
  c("hospital_a", "hospital_b", "hospital_c", "clinic_d"),
  function(f) read.csv(file.path("testdata/clinic", paste0(f, ".csv")))
)
lung_sites <- read_sites("testdata/lung_sites")
pooled_term <- function(sites, fit, term, ...) {
  co <- lapply(sites, function(d) summary(fit(d))$coefficients)
  yi <- sapply(co, function(c) c[term, 1])
  # coxph's second column is exp(coef): take the standard error by name.
  sei <- sapply(co, function(c) c[term, if ("se(coef)" %in% colnames(c)) "se(coef)" else 2])
  summary(rma(yi, sei = sei, control = tight, ...))
}
sink(file.path(out_dir, "hetero_guide_print.txt"))
cat("## lm_meta('clinic', 'systolic ~ age'), term age\n")
print(pooled_term(clinic_sites, function(d) lm(systolic ~ age, data = d), "age"))
cat("## glm_meta('clinic', 'event ~ smoker', 'binomial', 'method=DL, test=knha'), term smoker\n")
print(pooled_term(clinic_sites, function(d) glm(event ~ smoker, family = binomial, data = d), "smoker",
  method = "DL", test = "knha"))
cat("## coxph_meta('lung', 'Surv(time, status) ~ sex', 'method=DL'), term sex\n")
print(pooled_term(lung_sites, function(d) coxph(Surv(time, status) ~ sex, data = d), "sex", method = "DL"))
sink()

# --- linear mixed models ------------------------------------------------------

# lme4's default optimizer (nloptwrap BOBYQA) stops at ~1e-6 in theta; the
# references are fitted to the last digits (minqa's bobyqa with rhoend =
# 1e-12), and hetero_lmm_defaults.csv keeps the default fits' criteria and
# theta to show how far those are from the optimum.
tight_lmer <- lmerControl(optimizer = "bobyqa", optCtrl = list(rhoend = 1e-12, maxfun = 1e6))
lmm_cases <- list(
  list("int_k7", 7, y ~ x1 + x2 + (1 | site), TRUE),
  list("int_k3", 3, y ~ x1 + x2 + (1 | site), TRUE),
  list("int_ml_k7", 7, y ~ x1 + x2 + (1 | site), FALSE),
  list("slope_k7", 7, y ~ x1 + x2 + (1 + x1 | site), TRUE),
  list("slope_only_k7", 7, y ~ x1 + x2 + (0 + x1 | site), TRUE),
  list("ward_k3", 3, y ~ x1 + x2 + (1 | ward), TRUE)
)
fixef_rows <- list(); varcomp_rows <- list(); stats_rows <- list(); ranef_rows <- list()
default_rows <- list()
for (c in lmm_cases) {
  id <- c[[1]]; data <- sites_of(c[[2]]); formula <- c[[3]]; reml <- c[[4]]
  fit <- lmer(formula, data = data, REML = reml, control = tight_lmer)
  default <- lmer(formula, data = data, REML = reml)
  co <- summary(fit)$coefficients
  fixef_rows[[id]] <- data.frame(id = id, term = sapply(rownames(co), fedsql_term),
    estimate = co[, 1], std_error = co[, 2], statistic = co[, 3])
  vc <- as.data.frame(VarCorr(fit))
  varcomp_rows[[id]] <- data.frame(id = id, group = vc$grp,
    term1 = ifelse(is.na(vc$var1), "", sapply(ifelse(is.na(vc$var1), "x", vc$var1), fedsql_term)),
    term2 = ifelse(is.na(vc$var2), "", sapply(ifelse(is.na(vc$var2), "x", vc$var2), fedsql_term)),
    variance = vc$vcov,
    std_dev = ifelse(is.na(vc$var2), vc$sdcor, NA),
    corr = ifelse(is.na(vc$var2), NA, vc$sdcor))
  crit <- if (reml) REMLcrit(fit) else deviance(fit)
  stats_rows[[id]] <- data.frame(id = id, nobs = nobs(fit), ngroups = unname(ngrps(fit)),
    sigma = sigma(fit), log_likelihood = as.numeric(logLik(fit)), aic = AIC(fit),
    bic = BIC(fit), criterion = crit)
  default_crit <- if (reml) REMLcrit(default) else deviance(default)
  default_rows[[id]] <- data.frame(id = id, criterion = default_crit, tight_criterion = crit,
    theta = paste(sprintf("%.17g", getME(default, "theta")), collapse = " "),
    tight_theta = paste(sprintf("%.17g", getME(fit, "theta")), collapse = " "))
  re <- ranef(fit, condVar = TRUE)[[1]]
  pv <- attr(re, "postVar")
  for (j in seq_len(ncol(re))) {
    ranef_rows[[paste(id, j)]] <- data.frame(id = id, level = rownames(re),
      term = fedsql_term(colnames(re)[j]), estimate = re[, j], cond_std_error = sqrt(pv[j, j, ]))
  }
}
write_rows(do.call(rbind, fixef_rows), "hetero_lmm_fixef.csv")
write_rows(do.call(rbind, varcomp_rows), "hetero_lmm_varcomp.csv")
write_rows(do.call(rbind, stats_rows), "hetero_lmm_stats.csv")
write_rows(do.call(rbind, ranef_rows), "hetero_lmm_ranef.csv")
write_rows(do.call(rbind, default_rows), "hetero_lmm_defaults.csv")
sink(file.path(out_dir, "hetero_lmm_print.txt"))
print(summary(lmer(y ~ x1 + x2 + (1 + x1 | site), data = sites_of(7), control = tight_lmer)))
sink()

# The guide's lmm example: the demo clinic, a random intercept per site.
clinic <- do.call(rbind, lapply(c("hospital_a", "hospital_b", "hospital_c", "clinic_d"), function(f) {
  d <- read.csv(file.path("testdata/clinic", paste0(f, ".csv")))
  d$site <- f
  d
}))
sink(file.path(out_dir, "hetero_guide_print.txt"), append = TRUE)
cat("## lmm('clinic', 'systolic ~ age + bmi + (1 | _client)')\n")
print(summary(lmer(systolic ~ age + bmi + (1 | site), data = clinic, control = tight_lmer)))
sink()
