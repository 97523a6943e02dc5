# Reference values for fedsql's classical statistics (t_test, anova,
# chisq_test, crosstab, cor_test, histogram/hist, summary), computed with R's
# own functions and written as CSV so that the Rust tests need no R at run
# time. Run from the repository root:
#
#     Rscript testdata/reference/stats.R
#
# R 4.2.2, package stats only (no broom: the tidy() columns are built here
# with broom's names). Deterministic; rewrites the files byte for byte.
#
# Datasets: the demo federation `clinic` (testdata/clinic/*.csv, read as they
# are), and R's `mtcars` and `warpbreaks`, written here to mtcars.csv and
# warpbreaks.csv with text columns for their factors.
#
# Each result row has an `id` the test looks up; floats as %.17g, NA empty.

options(stringsAsFactors = FALSE)
out_dir <- "testdata/reference"

num <- function(x) ifelse(is.na(x), "", sprintf("%.17g", x))

write_rows <- function(rows, file) {
  df <- do.call(rbind, lapply(rows, function(r) as.data.frame(r, check.names = FALSE)))
  for (col in names(df)) {
    if (is.numeric(df[[col]])) df[[col]] <- num(df[[col]])
  }
  write.csv(df, file.path(out_dir, file), row.names = FALSE, quote = FALSE, na = "")
}

# --- datasets ---------------------------------------------------------------

clinic <- do.call(rbind, lapply(
  c("hospital_a", "hospital_b", "hospital_c", "clinic_d"),
  function(f) read.csv(file.path("testdata/clinic", paste0(f, ".csv")))
))

mt <- mtcars
rownames(mt) <- NULL
mt$cylf <- paste0("c", mt$cyl)
mt$trans <- ifelse(mt$am == 1, "manual", "auto")
mt$engine <- ifelse(mt$vs == 1, "straight", "vshaped")
write.csv(mt, file.path(out_dir, "mtcars.csv"), row.names = FALSE, quote = FALSE)
mt <- read.csv(file.path(out_dir, "mtcars.csv"))

wb <- warpbreaks
wb$wool <- as.character(wb$wool)
wb$tension <- as.character(wb$tension)
write.csv(wb, file.path(out_dir, "warpbreaks.csv"), row.names = FALSE, quote = FALSE)
wb <- read.csv(file.path(out_dir, "warpbreaks.csv"))

data <- list(clinic = clinic, mtcars = mt, warpbreaks = wb)

# --- t_test -----------------------------------------------------------------

tidy_t <- function(id, t) {
  two <- length(t$estimate) == 2
  list(
    id = id,
    estimate = if (two) unname(t$estimate[1] - t$estimate[2]) else unname(t$estimate),
    estimate1 = if (two) unname(t$estimate[1]) else NA,
    estimate2 = if (two) unname(t$estimate[2]) else NA,
    statistic = unname(t$statistic),
    parameter = unname(t$parameter),
    p_value = t$p.value,
    conf_low = t$conf.int[1],
    conf_high = t$conf.int[2],
    method = trimws(t$method),
    alternative = t$alternative
  )
}

with(clinic, {
  rows <<- list(
    tidy_t("clinic_welch", t.test(systolic ~ smoker)),
    tidy_t("clinic_pooled", t.test(systolic ~ smoker, var.equal = TRUE)),
    tidy_t("clinic_welch_less", t.test(bmi ~ sex, alternative = "less", conf.level = 0.9)),
    tidy_t("clinic_one", t.test(systolic, mu = 130)),
    tidy_t("clinic_one_greater", t.test(bmi, mu = 27, alternative = "greater")),
    tidy_t("clinic_paired", t.test(systolic - age)),
    tidy_t("clinic_welch_mu", t.test(age ~ event, mu = -2, conf.level = 0.99)),
    tidy_t("clinic_welch_mu_greater", t.test(systolic ~ smoker, mu = 2, alternative = "greater")),
    tidy_t("clinic_pooled_mu_less", t.test(bmi ~ sex, mu = 2, alternative = "less", var.equal = TRUE))
  )
})
with(mt, {
  rows <<- c(rows, list(
    tidy_t("mtcars_welch", t.test(mpg ~ trans)),
    tidy_t("mtcars_pooled_greater", t.test(mpg ~ trans, var.equal = TRUE, alternative = "greater")),
    tidy_t("mtcars_one", t.test(mpg, mu = 20)),
    tidy_t("mtcars_paired", t.test(mpg - qsec, conf.level = 0.9)),
    tidy_t("mtcars_welch_mu_greater", t.test(mpg ~ trans, mu = 2, alternative = "greater", conf.level = 0.9))
  ))
})
write_rows(rows, "stats_t_test.csv")

# --- anova ------------------------------------------------------------------

anova_rows <- function(id, fit) {
  a <- anova(fit)
  lapply(seq_len(nrow(a)), function(i) list(
    id = id,
    term = rownames(a)[i],
    df = a$Df[i],
    sumsq = a$`Sum Sq`[i],
    meansq = a$`Mean Sq`[i],
    statistic = a$`F value`[i],
    p_value = a$`Pr(>F)`[i]
  ))
}
rows <- c(
  anova_rows("clinic_main", lm(systolic ~ age + bmi + region + smoker, data = clinic)),
  anova_rows("clinic_interaction", lm(systolic ~ age * sex + region, data = clinic)),
  anova_rows("mtcars_interaction", lm(mpg ~ wt * cylf, data = mt)),
  anova_rows("warpbreaks_factorial", lm(breaks ~ wool * tension, data = wb))
)
write_rows(rows, "stats_anova.csv")

# --- chisq_test and crosstab ------------------------------------------------

tidy_chisq <- function(id, x) list(
  id = id,
  statistic = unname(x$statistic),
  parameter = unname(x$parameter),
  p_value = x$p.value,
  method = x$method
)
rows <- list(
  tidy_chisq("clinic_2x2", suppressWarnings(chisq.test(table(clinic$smoker, clinic$event)))),
  tidy_chisq("clinic_2x2_uncorrected", chisq.test(table(clinic$smoker, clinic$event), correct = FALSE)),
  tidy_chisq("clinic_4x2", chisq.test(table(clinic$region, clinic$sex))),
  tidy_chisq("mtcars_2x2", suppressWarnings(chisq.test(table(mt$engine, mt$trans)))),
  tidy_chisq("mtcars_2x2_uncorrected", suppressWarnings(chisq.test(table(mt$engine, mt$trans), correct = FALSE))),
  tidy_chisq("mtcars_3x2", suppressWarnings(chisq.test(table(mt$cylf, mt$trans))))
)
write_rows(rows, "stats_chisq_test.csv")

crosstab_rows <- function(id, a, b) {
  t <- addmargins(table(a, b))
  rows <- list()
  for (i in rownames(t)) for (j in colnames(t)) {
    rows[[length(rows) + 1]] <- list(
      id = id,
      a = if (i == "Sum") "" else i,
      b = if (j == "Sum") "" else j,
      n = t[i, j]
    )
  }
  rows
}
rows <- c(
  crosstab_rows("clinic_region_sex", clinic$region, clinic$sex),
  crosstab_rows("mtcars_cylf_gear", mt$cylf, mt$gear)
)
write_rows(rows, "stats_crosstab.csv")

# --- cor_test ---------------------------------------------------------------

tidy_cor <- function(id, x) list(
  id = id,
  estimate = unname(x$estimate),
  statistic = unname(x$statistic),
  parameter = unname(x$parameter),
  p_value = x$p.value,
  conf_low = x$conf.int[1],
  conf_high = x$conf.int[2],
  method = x$method,
  alternative = x$alternative
)
rows <- list(
  tidy_cor("clinic_age_systolic", cor.test(clinic$age, clinic$systolic)),
  tidy_cor("clinic_bmi_systolic_greater", cor.test(clinic$bmi, clinic$systolic, alternative = "greater")),
  tidy_cor("clinic_visits_age_less", cor.test(clinic$visits, clinic$age, alternative = "less", conf.level = 0.9)),
  tidy_cor("mtcars_mpg_wt", cor.test(mt$mpg, mt$wt)),
  tidy_cor("mtcars_mpg_qsec", cor.test(mt$mpg, mt$qsec, conf.level = 0.99))
)
write_rows(rows, "stats_cor_test.csv")

# --- histograms -------------------------------------------------------------

hist_rows <- function(id, x, lower, upper, bins) {
  x <- x[!is.na(x)]
  h <- hist(x, breaks = seq(lower, upper, length.out = bins + 1), plot = FALSE)
  lapply(seq_along(h$counts), function(i) list(
    id = id,
    bin = i,
    lower = h$breaks[i],
    upper = h$breaks[i + 1],
    count = h$counts[i],
    density = h$density[i]
  ))
}
rows <- c(
  hist_rows("clinic_systolic", clinic$systolic, 80, 200, 12),
  hist_rows("clinic_bmi", clinic$bmi, 10, 50, 7),
  hist_rows("mtcars_mpg", mt$mpg, 10, 35, 5),
  hist_rows("mtcars_wt", mt$wt, 1.5, 5.5, 16)
)
write_rows(rows, "stats_hist.csv")

# --- summary ----------------------------------------------------------------

summary_rows <- function(id, df, columns) {
  lapply(columns, function(c) {
    x <- df[[c]]
    v <- x[!is.na(x)]
    q <- quantile(v, c(0.25, 0.5, 0.75), type = 7)
    list(
      id = id, column = c, n = length(v), nmiss = sum(is.na(x)),
      mean = mean(v), sd = sd(v), min = min(v),
      q1 = unname(q[1]), median = unname(q[2]), q3 = unname(q[3]), max = max(v)
    )
  })
}
rows <- c(
  summary_rows("clinic", clinic, c("age", "bmi", "systolic", "visits")),
  summary_rows("mtcars", mt, c("mpg", "wt", "hp"))
)
write_rows(rows, "stats_summary.csv")
