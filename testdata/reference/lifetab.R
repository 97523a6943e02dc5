# Reference values for kaplan_meier and logrank_test on a grid coarser
# than the data (issue 58): the life-table (actuarial) estimate of
# KMsurv::lifetab on the grouped counts, the product-limit on the grid, the
# exact survfit at the grid's breaks, and survdiff on times grouped to the
# grid; and how far each grid's answer is from the exact one.
#
#     Rscript testdata/reference/lifetab.R     # from the repository root
#
# Deterministic. Intervals are (lower, upper], as fedsql's life_table
# counts them; the grid is fedsql's `width=w, max=m`: 0, w, 2w, ... < m,
# then m. Numbers are written with %.17g; NA is an empty field.
#
# Output, per dataset and width:
#   lifetab_<data>_<w>.csv   lower, upper, nsubs, nlost, nrisk, nevent,
#                            surv (at the start, lifetab's), se_surv,
#                            surv_end, se_end (at upper), km_grid_end
#                            (product-limit on the grid), exact_end
#                            (survfit at upper)
#   lifetab_logrank.csv      data, group, width, statistic on the grouped
#                            times, exact statistic
#   lifetab_distance.csv     data, width, the largest |actuarial − exact|
#                            and |product-limit on the grid − exact| over
#                            the breaks, and where

suppressPackageStartupMessages({
  library(survival)
  library(KMsurv)
})
dir <- "testdata/reference"
num <- function(x) ifelse(is.na(x), "", sprintf("%.17g", x))
write_num <- function(df, file) {
  out <- as.data.frame(lapply(df, function(col) if (is.numeric(col)) num(col) else col))
  write.csv(out, file.path(dir, file), row.names = FALSE, quote = FALSE, na = "")
}

grid <- function(width, max) {
  b <- seq(0, by = width, length.out = ceiling(max / width))
  b <- b[b < max]
  c(b, max)
}

# The life table of `time`/`status` on `breaks`, beside the exact curve.
table_on <- function(time, status, breaks) {
  m <- length(breaks) - 1
  interval <- cut(time, breaks, right = TRUE, labels = FALSE)
  nevent <- tabulate(interval[status == 1], nbins = m)
  nlost <- tabulate(interval[status == 0], nbins = m)
  ninit <- length(time)
  lt <- lifetab(breaks, ninit, nlost, nevent)
  q <- nevent / lt$nrisk
  surv_end <- cumprod(1 - q)
  se_end <- surv_end * sqrt(cumsum(nevent / (lt$nrisk * (lt$nrisk - nevent))))
  km_grid_end <- cumprod(ifelse(lt$nsubs > 0, 1 - nevent / lt$nsubs, 1))
  fit <- survfit(Surv(time, status) ~ 1)
  exact_end <- summary(fit, times = breaks[-1], extend = TRUE)$surv
  data.frame(
    lower = breaks[-(m + 1)], upper = breaks[-1],
    nsubs = lt$nsubs, nlost = lt$nlost, nrisk = lt$nrisk, nevent = lt$nevent,
    surv = lt$surv, se_surv = lt$se.surv,
    surv_end = surv_end, se_end = se_end,
    km_grid_end = km_grid_end, exact_end = exact_end
  )
}

lung <- read.csv(file.path(dir, "lung.csv"))
veteran <- read.csv(file.path(dir, "veteran.csv"))
data <- list(
  lung = list(df = lung, max = 1080, group = "sex"),
  veteran = list(df = veteran, max = 1020, group = "trt")
)
widths <- c(30, 90, 180)

distance <- NULL
logrank <- NULL
for (name in names(data)) {
  d <- data[[name]]
  for (w in widths) {
    breaks <- grid(w, d$max)
    t <- table_on(d$df$time, d$df$status, breaks)
    write_num(t, sprintf("lifetab_%s_%d.csv", name, w))
    a <- abs(t$surv_end - t$exact_end)
    k <- abs(t$km_grid_end - t$exact_end)
    distance <- rbind(distance, data.frame(
      data = name, width = w,
      actuarial_max = max(a, na.rm = TRUE), actuarial_at = t$upper[which.max(a)],
      km_grid_max = max(k, na.rm = TRUE), km_grid_at = t$upper[which.max(k)]
    ))
    # survdiff on times moved to their interval's upper break.
    upper <- breaks[cut(d$df$time, breaks, right = TRUE, labels = FALSE) + 1]
    g <- d$df[[d$group]]
    grouped <- survdiff(Surv(upper, d$df$status) ~ g)$chisq
    exact <- survdiff(Surv(d$df$time, d$df$status) ~ g)$chisq
    logrank <- rbind(logrank, data.frame(
      data = name, group = d$group, width = w, statistic = grouped, exact = exact
    ))
  }
}
write_num(distance, "lifetab_distance.csv")
write_num(logrank, "lifetab_logrank.csv")
