# Reference values for fedsql's pca, kmeans, kaplan_meier, logrank_test and
# coxph, computed with R (stats and the `survival` package) and written to
# CSV so that the Rust tests need no R at run time.
#
#     Rscript testdata/reference/survival_multivariate.R     # from the repository root
#
# Deterministic (no random numbers). The datasets are written first and every
# model is fitted on the data as read back from those files. Numbers are
# written with %.17g (they round-trip exactly); NA is an empty field.
#
# Site splits: the tests put a dataset's rows, in file order, into sites of
# the sizes tests/suites/support.rs `split_sizes(n, k)` gives (k = 1, 3, 7;
# with 7 sites one is empty and one holds a single row). A Cox model is
# stratified by site, so the reference for k sites is
# coxph(Surv(time, status) ~ ... + strata(site)) with the same assignment.

suppressPackageStartupMessages(library(survival))
dir <- "testdata/reference"

num <- function(x) ifelse(is.na(x), "", sprintf("%.17g", x))
out <- function(df, name) {
  for (c in names(df)) if (is.numeric(df[[c]])) df[[c]] <- num(df[[c]])
  write.table(df, file.path(dir, name), sep = ",", quote = FALSE,
              row.names = FALSE, na = "")
}
dataset <- function(df, name) {
  write.table(df, file.path(dir, name), sep = ",", quote = FALSE,
              row.names = FALSE, na = "")
  read.csv(file.path(dir, name))
}

split_sizes <- function(n, k) {
  if (k == 1) return(n)
  if (k == 3) return(c(1, n %/% 3, n - 1 - n %/% 3))
  if (k == 7) {
    s <- c(0, 1, 2, n %/% 10, n %/% 7, n %/% 4)
    return(c(s, n - sum(s)))
  }
  stop("k")
}
site_of <- function(n, k) rep(seq_len(k), times = split_sizes(n, k))

# ---- datasets -------------------------------------------------------------
# lung: status recoded 1/2 -> 0/1 (censored/dead); dots in names -> '_'.
lung0 <- survival::lung
lung0$status <- lung0$status - 1
names(lung0) <- gsub(".", "_", names(lung0), fixed = TRUE)
lung <- dataset(lung0, "lung.csv")

vet0 <- survival::veteran
vet0$celltype <- as.character(vet0$celltype)
veteran <- dataset(vet0, "veteran.csv")

usa0 <- datasets::USArrests
usa0 <- data.frame(state = gsub(" ", "_", rownames(usa0)), murder = usa0$Murder,
                   assault = usa0$Assault, urbanpop = usa0$UrbanPop, rape = usa0$Rape)
usarrests <- dataset(usa0, "usarrests.csv")

iris0 <- datasets::iris
iris0 <- data.frame(sepal_length = iris0$Sepal.Length, sepal_width = iris0$Sepal.Width,
                    petal_length = iris0$Petal.Length, petal_width = iris0$Petal.Width,
                    species = as.character(iris0$Species))
iris <- dataset(iris0, "iris.csv")

# ---- PCA ------------------------------------------------------------------
pca_ref <- function(name, x, scale) {
  x <- na.omit(x)
  p <- prcomp(x, center = TRUE, scale. = scale)
  v <- p$sdev^2
  out(data.frame(component = seq_along(p$sdev), sdev = p$sdev,
                 proportion = v / sum(v), cumulative = cumsum(v) / sum(v)),
      paste0("pca_", name, ".sdev.csv"))
  l <- as.data.frame(unclass(p$rotation))
  out(cbind(data.frame(variable = rownames(p$rotation)), l),
      paste0("pca_", name, ".loadings.csv"))
}
cols <- c("murder", "assault", "urbanpop", "rape")
pca_ref("usarrests_scaled", usarrests[cols], TRUE)
pca_ref("usarrests_cov", usarrests[cols], FALSE)
pca_ref("lung_scaled", lung[c("age", "ph_karno", "pat_karno", "meal_cal", "wt_loss")], TRUE)

# ---- k-means (Lloyd, given centres) ----------------------------------------
km_ref <- function(name, x, centers, iter_max) {
  fit <- kmeans(x, centers = centers, iter.max = iter_max, algorithm = "Lloyd")
  c <- as.data.frame(fit$centers)
  out(cbind(data.frame(cluster = seq_len(nrow(c)), size = fit$size, withinss = fit$withinss), c),
      paste0("kmeans_", name, ".clusters.csv"))
  out(data.frame(tot_withinss = fit$tot.withinss, betweenss = fit$betweenss,
                 totss = fit$totss, iterations = fit$iter),
      paste0("kmeans_", name, ".summary.csv"))
}
# The starting centres, as the tests pass them to `centers=`.
usa_centers <- matrix(c(4, 100, 60, 15,
                        10, 180, 65, 22,
                        12, 280, 70, 30), ncol = 4, byrow = TRUE)
km_ref("usarrests", usarrests[cols], usa_centers, 50)
iris_cols <- c("sepal_length", "sepal_width", "petal_length", "petal_width")
iris_centers <- matrix(c(5, 3.5, 1.5, 0.2,
                         6, 2.5, 4, 1.2,
                         7, 3, 6, 2), ncol = 4, byrow = TRUE)
km_ref("iris", iris[iris_cols], iris_centers, 50)
# Stopped by iter.max before converging (R warns, and reports iter.max + 1
# iterations): withinss then measures the last assignment around the moved
# centres.
suppressWarnings(km_ref("iris_iter1", iris[iris_cols], iris_centers, 1))

# ---- Kaplan-Meier and log-rank ---------------------------------------------
km_table <- function(name, data, by) {
  times <- sort(unique(data$time))
  f <- if (is.null(by)) survfit(Surv(time, status) ~ 1, data = data)
       else survfit(as.formula(paste("Surv(time, status) ~", by)), data = data)
  s <- summary(f, times = times, extend = TRUE)
  stratum <- if (is.null(by)) rep("", length(s$time))
             else sub(paste0("^", by, "="), "", as.character(s$strata))
  out(data.frame(stratum = stratum, time = s$time, n_risk = s$n.risk,
                 n_event = s$n.event, n_censor = s$n.censor, survival = s$surv,
                 std_err = s$std.err, conf_low = s$lower, conf_high = s$upper),
      paste0("km_", name, ".csv"))
}
km_table("lung", lung, NULL)
km_table("lung_sex", lung, "sex")
km_table("veteran", veteran, NULL)
km_table("veteran_trt", veteran, "trt")

lr_ref <- function(name, data, group) {
  d <- survdiff(as.formula(paste("Surv(time, status) ~", group)), data = data)
  df <- length(d$n) - 1
  out(data.frame(statistic = d$chisq, parameter = df,
                 p_value = pchisq(d$chisq, df, lower.tail = FALSE)),
      paste0("logrank_", name, ".csv"))
}
lr_ref("lung_sex", lung, "sex")
lr_ref("veteran_celltype", veteran, "celltype")
lr_ref("veteran_trt", veteran, "trt")

# ---- Cox, stratified by site -----------------------------------------------
cox_ref <- function(name, data, rhs, ties, k) {
  data$site <- site_of(nrow(data), k)
  f <- if (k == 1) as.formula(paste("Surv(time, status) ~", rhs))
       else as.formula(paste("Surv(time, status) ~", rhs, "+ strata(site)"))
  fit <- coxph(f, data = data, ties = ties)
  s <- summary(fit)
  co <- s$coefficients
  ci <- confint(fit)
  out(data.frame(term = rownames(co), estimate = co[, "coef"], std_error = co[, "se(coef)"],
                 statistic = co[, "z"], p_value = co[, "Pr(>|z|)"],
                 conf_low = ci[, 1], conf_high = ci[, 2], exp_estimate = co[, "exp(coef)"]),
      sprintf("cox_%s_%s_%d.coef.csv", name, ties, k))
  out(data.frame(loglik = fit$loglik[2], loglik_null = fit$loglik[1], n = fit$n,
                 n_event = fit$nevent, concordance = fit$concordance[["concordance"]],
                 # summary() rounds the Wald statistic: take the fit's own.
                 wald = fit$wald.test, score = fit$score,
                 lr = 2 * (fit$loglik[2] - fit$loglik[1]), df = sum(!is.na(fit$coefficients)),
                 iterations = fit$iter),
      sprintf("cox_%s_%s_%d.stats.csv", name, ties, k))
}
for (ties in c("efron", "breslow")) {
  for (k in c(1, 3, 7)) {
    cox_ref("lung", lung, "age + sex + ph_ecog", ties, k)
    cox_ref("veteran", veteran, "karno + age + diagtime + trt + celltype", ties, k)
  }
  cox_ref("lung_strata_sex", lung, "age + ph_ecog + strata(sex)", ties, 3)
}

writeLines(c(R.version.string, paste("survival", packageVersion("survival"))),
           file.path(dir, "VERSIONS_R.txt"))
