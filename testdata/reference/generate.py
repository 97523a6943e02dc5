#!/usr/bin/env python3
"""Reference values from statsmodels for fedsql's regression (lm/glm) tests.

What it writes, all into testdata/reference/ (the directory of this script):

  Datasets (CSV, header row, ',' separator, '.' decimals, NULL = empty field,
  floats as Python repr = shortest string that round-trips to the same double,
  integer columns as plain integers):
    longley.csv          NIST StRD / statsmodels `longley` (16 rows)
    stackloss.csv        statsmodels `stackloss` (21 rows)
    grunfeld.csv         statsmodels `grunfeld` (220 rows, `firm` is text)
    synthetic_lm.csv     seeded synthetic data (500 rows, ~5% NULL cells)
    spector.csv          statsmodels `spector` (32 rows)
    cpunish.csv          statsmodels `cpunish` (17 rows) + ln_vc100k96 = log(vc100k96)
    scotland.csv         statsmodels `scotland` (32 rows)
    star98.csv           statsmodels `star98` (303 rows)
    synthetic_poisson.csv seeded synthetic counts (800 rows, ~3% NULL cells)

  Reference results, per model: <model>.coef.csv (one row per term) and
  <model>.stats.csv (one row); every float written with '%.17g'.
    lm : longley_lm, stackloss_lm, grunfeld_lm, synthetic_lm,
         synthetic_lm_noint, synthetic_lm_aliased
    glm: spector_logit, spector_probit, cpunish_poisson, scotland_gamma,
         star98_binomial, synthetic_poisson

  longley_nist.csv       NIST StRD certified values for Longley, typed in from
                         NIST's published certificate (not computed)
  VERSIONS.txt           the Python / library versions of the last run

Every model is fitted on the data AS READ BACK from the CSV file written
above it (so the committed CSV and the committed numbers always agree).

The committed files were produced by:
    Python 3.11.7, statsmodels 0.15.0, numpy 2.4.6, scipy 1.17.1,
    pandas 3.1.1, patsy 1.0.3  (formula engine: patsy)
To rerun, from the repository root:
    pip install statsmodels==0.15.0 numpy==2.4.6 scipy==1.17.1 \
        pandas==3.1.1 patsy==1.0.3
    python3 testdata/reference/generate.py
The script is deterministic (fixed seeds, numpy's PCG64 Generator); with the
versions above it rewrites the committed files byte for byte.  Another numpy
could in principle change the synthetic draws; other library versions may
change the last digits of the fitted values.

How the numbers are computed (see README.md beside this file for more):

  Term names: patsy's column names, with `Intercept` renamed `(Intercept)`;
  factors as `C(grp)[T.b]`, interactions as `x1:C(grp)[T.b]`, in patsy's
  column order.

  lm (statsmodels OLS via smf.ols, default fit(), pinv): rows with a NULL in any
  column the formula uses are dropped first (rows_dropped counts them).
    estimate, std_error, statistic = t, p_value = 2 * P(T_df > |t|),
    conf_low/conf_high = estimate -/+ qt(0.975, df_residual) * std_error
    (statsmodels conf_int(), = R confint.lm).
    nobs, df_model = rank - (1 if intercept), df_residual = n - rank,
    r_squared (uncentered when there is no intercept, as R),
    adj_r_squared = 1 - (1 - R2) (n - i) / df_residual, i = 1 if intercept,
    sigma = sqrt(ssr / df_residual), f_statistic = (ess / df_model) / sigma^2
    (ess centered with intercept, uncentered without), f_p_value,
    log_likelihood = -n/2 (log(2 pi) + 1 + log(ssr / n))  (statsmodels llf,
    = R logLik.lm), aic = -2 logLik + 2 (p + 1), bic = -2 logLik +
    log(n) (p + 1), p = number of estimated coefficients (rank), +1 for sigma
    (= R's AIC/BIC; statsmodels' own OLS aic/bic omit the +1).
  synthetic_lm_aliased: y ~ x1 + x2 + x3 with x3 = x1 + x2.  R's lm pivots x3
    out and prints NA for it; statsmodels would use a pseudo-inverse instead.
    So the file holds the fit of y ~ x1 + x2 (same rows) plus a row for x3
    with all fields empty; the stats are those of that fit.

  glm (statsmodels smf.glm, IRLS, fit(tol=1e-12, maxiter=200): stops when the
  deviance changes by less than 1e-12; rows with a NULL in a used column or
  in the offset are dropped first):
    estimate; std_error from statsmodels' covariance (for gamma scaled by the
    Pearson dispersion, as R's summary.glm).
    binomial, poisson (dispersion fixed at 1): statistic = z,
      p_value = 2 * P(Z > |z|), conf = estimate -/+ qnorm(0.975) * se
      (= R's confint.default; R's confint() would give profile intervals).
    gamma (dispersion estimated): statistic = t, p_value = 2 * pt(-|t|,
      df_residual) (as R's summary.glm), conf = estimate -/+ qt(0.975,
      df_residual) * se (NOT R's confint.default, which uses qnorm).
    stats: family, link as R names them (family(fit)$family / $link:
      "binomial", "poisson", "Gamma"; "logit", "probit", "log");
      nobs = rows used (star98: districts, not trials); rows_dropped;
      df_null = nobs - 1 (all models have an intercept); df_residual =
      nobs - rank; null_deviance = deviance of the intercept-only model with
      the same offset and weights (R's glm refits it when there is an
      offset); deviance; dispersion = 1 for binomial/poisson, Pearson
      chi2 / df_residual for gamma (R's summary.glm dispersion);
      log_likelihood as R's logLik.glm:
        binomial: sum log dbinom(k_i, n_i, mu_i)   (incl. log choose(n, k))
        poisson : sum log dpois(y_i, mu_i)
        Gamma   : sum log dgamma(y_i, shape = 1/phi, scale = mu_i phi) with
                  phi = deviance / nobs (R's Gamma()$aic; NOT the Pearson
                  dispersion that statsmodels' llf uses)
      aic = -2 logLik + 2 k, bic = -2 logLik + log(nobs) k, k = rank, + 1 for
      Gamma (the dispersion), as R's AIC()/BIC() of a glm (statsmodels'
      GLM aic never adds the dispersion);
      iterations = the number of IRLS iterations R's glm.fit would report
      ("Number of Fisher Scoring iterations"), from a re-implementation of
      glm.fit in this script (R's starting values, epsilon = 1e-8,
      |dev - devold| / (|dev| + 0.1) < epsilon); the estimates themselves
      are statsmodels' tightly converged ones;
      converged = statsmodels' flag ("true"/"false").
"""

import csv
import io
import math
import platform
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import patsy
import scipy
import scipy.stats as st
import statsmodels
import statsmodels.api as sm
import statsmodels.formula.api as smf

warnings.simplefilter("ignore")

OUT = Path(__file__).resolve().parent

try:  # statsmodels >= 0.15 can use formulaic; pin patsy for its term names
    import statsmodels.formula as _smformula

    _smformula.options.formula_engine = "patsy"
except (ImportError, AttributeError):
    pass


# --------------------------------------------------------------------------
# CSV writing / reading
# --------------------------------------------------------------------------

def g17(x):
    """'%.17g' for a float, '' for NULL/NaN."""
    if x is None:
        return ""
    x = float(x)
    if math.isnan(x):
        return ""
    return "%.17g" % x


def write_table(name, header, rows):
    """rows: lists of already formatted strings."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(r)
    (OUT / name).write_text(buf.getvalue(), encoding="utf-8")


def write_dataset(name, df, int_cols=()):
    """Write a data frame: floats as repr, int_cols as integers, text as is,
    missing values as empty fields."""
    rows = []
    for rec in df.itertuples(index=False):
        out = []
        for col, v in zip(df.columns, rec):
            if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
                out.append("")
            elif col in int_cols:
                fv = float(v)
                assert fv == int(fv), (name, col, v)
                out.append(str(int(fv)))
            elif isinstance(v, str):
                assert "," not in v and "\n" not in v and '"' not in v
                out.append(v)
            else:
                out.append(repr(float(v)))
        rows.append(out)
    write_table(name + ".csv", list(df.columns), rows)
    return read_dataset(name)


def read_dataset(name):
    return pd.read_csv(OUT / (name + ".csv"), float_precision="round_trip",
                       keep_default_na=False, na_values=[""])


# --------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------

def sm_data(name):
    return getattr(sm.datasets, name).load_pandas().data.reset_index(drop=True)


def make_longley():
    d = sm_data("longley")
    d = d.rename(columns={"TOTEMP": "totemp", "GNPDEFL": "gnpdefl", "GNP": "gnp",
                          "UNEMP": "unemp", "ARMED": "armed", "POP": "pop",
                          "YEAR": "year"})
    d = d[["totemp", "gnpdefl", "gnp", "unemp", "armed", "pop", "year"]]
    return write_dataset("longley", d, int_cols={"totemp", "gnp", "unemp", "armed",
                                                 "pop", "year"})


def make_stackloss():
    d = sm_data("stackloss")
    d.columns = [c.lower() for c in d.columns]
    return write_dataset("stackloss", d, int_cols=set(d.columns))


def make_grunfeld():
    d = sm_data("grunfeld")[["invest", "value", "capital", "firm", "year"]]
    d["firm"] = d["firm"].astype(str)
    return write_dataset("grunfeld", d, int_cols={"year"})


def make_synthetic_lm():
    rng = np.random.default_rng(20240901)
    n = 500
    x1 = np.round(rng.normal(10.0, 3.0, n), 4)
    x2 = np.round(rng.uniform(0.0, 20.0, n), 4)
    levels = np.array(["a", "b", "c", "d"])
    grp = levels[rng.integers(0, 4, n)]
    shift = {"a": 0.0, "b": 1.0, "c": -2.0, "d": 3.0}
    slope = {"a": 0.0, "b": 0.5, "c": -0.3, "d": 0.2}
    gs = np.array([shift[g] for g in grp])
    gb = np.array([slope[g] for g in grp])
    y = np.round(2.5 + 1.5 * x1 - 0.8 * x2 + gs + gb * x1
                 + rng.normal(0.0, 1.5, n), 4)
    miss = rng.random((n, 4)) < 0.05          # y, x1, x2, grp
    d = pd.DataFrame({"id": np.arange(1, n + 1),
                      "y": np.where(miss[:, 0], np.nan, y),
                      "x1": np.where(miss[:, 1], np.nan, x1),
                      "x2": np.where(miss[:, 2], np.nan, x2),
                      "grp": pd.Series(grp, dtype=object).where(~miss[:, 3], None)})
    d["x3"] = d["x1"] + d["x2"]               # NaN where either is NULL
    return write_dataset("synthetic_lm", d, int_cols={"id"})


def make_spector():
    d = sm_data("spector")
    d.columns = [c.lower() for c in d.columns]
    return write_dataset("spector", d, int_cols={"tuce", "psi", "grade"})


def make_cpunish():
    d = sm_data("cpunish")
    d.columns = [c.lower() for c in d.columns]
    d["ln_vc100k96"] = np.log(d["vc100k96"])
    return write_dataset("cpunish", d, int_cols={"executions", "income", "vc100k96",
                                                 "south"})


def make_scotland():
    d = sm_data("scotland")
    d.columns = [c.lower() for c in d.columns]
    return write_dataset("scotland", d)


def make_star98():
    d = sm_data("star98")
    d.columns = [c.lower() for c in d.columns]
    return write_dataset("star98", d, int_cols={"nabove", "nbelow"})


def make_synthetic_poisson():
    rng = np.random.default_rng(20240902)
    n = 800
    x1 = np.round(rng.normal(0.0, 1.0, n), 4)
    x2 = np.round(rng.uniform(0.0, 3.0, n), 4)
    levels = np.array(["a", "b", "c"])
    g = levels[rng.integers(0, 3, n)]
    geff = {"a": 0.0, "b": 0.4, "c": -0.5}
    exposure = np.round(rng.uniform(0.5, 5.0, n), 3)
    offset_log = np.log(exposure)
    eta = 0.3 + 0.5 * x1 - 0.2 * x2 + np.array([geff[v] for v in g]) + offset_log
    y = rng.poisson(np.exp(eta)).astype(float)
    miss = rng.random((n, 4)) < 0.03          # y, x1, x2, g
    d = pd.DataFrame({"id": np.arange(1, n + 1),
                      "y": np.where(miss[:, 0], np.nan, y),
                      "x1": np.where(miss[:, 1], np.nan, x1),
                      "x2": np.where(miss[:, 2], np.nan, x2),
                      "g": pd.Series(g, dtype=object).where(~miss[:, 3], None),
                      "offset_log": offset_log})
    return write_dataset("synthetic_poisson", d, int_cols={"id", "y"})


# --------------------------------------------------------------------------
# Helpers for the fits
# --------------------------------------------------------------------------

def used_columns(formula, df):
    """Data columns a formula refers to (by name)."""
    desc = patsy.ModelDesc.from_formula(formula)
    names = set()
    for term in desc.lhs_termlist + desc.rhs_termlist:
        for factor in term.factors:
            code = factor.code
            for c in df.columns:
                # whole-word match of a column name inside the factor code
                if re.search(r"(?<![A-Za-z0-9_])" + re.escape(c) + r"(?![A-Za-z0-9_])",
                             code):
                    names.add(c)
    return [c for c in df.columns if c in names]


def complete_rows(formula, df, extra=()):
    cols = used_columns(formula, df) + list(extra)
    d = df.dropna(subset=cols).reset_index(drop=True)
    return d, len(df) - len(d), cols


def r_term(name):
    return "(Intercept)" if name == "Intercept" else name


COEF_HEADER = ["term", "estimate", "std_error", "statistic", "p_value",
               "conf_low", "conf_high"]


def write_coef(model, rows):
    write_table(model + ".coef.csv", COEF_HEADER,
                [[t] + [g17(v) for v in vals] for t, *vals in rows])


def write_stats(model, header, values):
    out = []
    for v in values:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, (bool, np.bool_)):
            out.append("true" if v else "false")
        elif isinstance(v, (int, np.integer)):
            out.append(str(int(v)))
        else:
            out.append(g17(v))
    write_table(model + ".stats.csv", header, [out])


SUMMARY = []


def note(line):
    print(line)
    SUMMARY.append(line)


# --------------------------------------------------------------------------
# Linear models
# --------------------------------------------------------------------------

LM_STATS = ["nobs", "df_model", "df_residual", "r_squared", "adj_r_squared",
            "sigma", "f_statistic", "f_p_value", "log_likelihood", "aic", "bic",
            "rows_dropped"]


def fit_lm(model, formula, df, aliased=()):
    """aliased: terms written as empty rows after the fitted ones (the fit
    itself uses the formula without them, but drops rows by the full list)."""
    d, dropped, cols = complete_rows(formula, df, extra=aliased)
    fit_formula = formula
    for a in aliased:
        fit_formula = fit_formula.replace(" + " + a, "")
    res = smf.ols(fit_formula, data=d).fit()  # default pinv (SVD)
    n = int(res.nobs)
    assert n == len(d)
    # patsy's own NA handling on the raw frame must agree with ours
    raw = smf.ols(formula, data=df)
    assert int(raw.nobs) == n, (model, raw.nobs, n)

    X = res.model.exog
    yv = res.model.endog
    p = int(np.linalg.matrix_rank(X))
    assert p == X.shape[1]
    has_int = "Intercept" in res.params.index
    df_res = n - p
    ssr = float(np.sum(res.resid ** 2))
    tss = float(np.sum((yv - yv.mean()) ** 2)) if has_int else float(np.sum(yv ** 2))
    r2 = 1 - ssr / tss
    adj = 1 - (1 - r2) * (n - (1 if has_int else 0)) / df_res
    sigma = math.sqrt(ssr / df_res)
    df_model = p - (1 if has_int else 0)
    fstat = ((tss - ssr) / df_model) / (ssr / df_res)
    fp = st.f.sf(fstat, df_model, df_res)
    llf = -n / 2 * (math.log(2 * math.pi) + 1 + math.log(ssr / n))
    # cross-check our R definitions against statsmodels
    for a, b, what in ((r2, res.rsquared, "R2"), (adj, res.rsquared_adj, "adjR2"),
                       (fstat, res.fvalue, "F"), (llf, res.llf, "llf"),
                       (sigma ** 2, res.scale, "sigma^2")):
        assert abs(a - b) <= 1e-9 * max(1.0, abs(b)), (model, what, a, b)
    assert res.df_model == df_model and res.df_resid == df_res
    aic = -2 * llf + 2 * (p + 1)
    bic = -2 * llf + math.log(n) * (p + 1)

    ci = res.conf_int(alpha=0.05)
    rows = []
    for t in res.params.index:
        rows.append([r_term(t), res.params[t], res.bse[t], res.tvalues[t],
                     res.pvalues[t], ci.loc[t, 0], ci.loc[t, 1]])
    for a in aliased:
        rows.append([a] + [None] * 6)
    write_coef(model, rows)
    write_stats(model, LM_STATS, [n, df_model, df_res, r2, adj, sigma, fstat, fp,
                                  llf, aic, bic, dropped])
    note(f"{model}: {formula}  n={n} dropped={dropped} R2={r2:.10g} sigma={sigma:.10g}")
    return res, d


# NIST StRD, Longley (LONGLEY.dat), certified values, typed in from NIST's
# Statistical Reference Datasets certificate ("Certified Regression
# Statistics" / "Certified Analysis of Variance Table").  Strings, exactly
# as published (15 significant digits).
NIST_LONGLEY = [
    # quantity, term, value
    ("estimate", "(Intercept)", "-3482258.63459582"),
    ("estimate", "gnpdefl", "15.0618722713733"),
    ("estimate", "gnp", "-0.358191792925910E-01"),
    ("estimate", "unemp", "-2.02022980381683"),
    ("estimate", "armed", "-1.03322686717359"),
    ("estimate", "pop", "-0.511041056535807E-01"),
    ("estimate", "year", "1829.15146461355"),
    ("std_error", "(Intercept)", "890420.383607373"),
    ("std_error", "gnpdefl", "84.9149257747669"),
    ("std_error", "gnp", "0.334910077722432E-01"),
    ("std_error", "unemp", "0.488399681651699"),
    ("std_error", "armed", "0.214274163161675"),
    ("std_error", "pop", "0.226073200069370"),
    ("std_error", "year", "455.478499142212"),
    ("residual_sd", "", "304.854073561965"),
    ("r_squared", "", "0.995479004577296"),
    ("regression_ss", "", "184172401.944494"),
    ("regression_ms", "", "30695400.3240823"),
    ("residual_ss", "", "836424.055505915"),
    ("residual_ms", "", "92936.0061673238"),
    ("f_statistic", "", "330.285339234588"),
    ("df_regression", "", "6"),
    ("df_residual", "", "9"),
]


def plain_decimal(s):
    """'-0.358191792925910E-01' -> '-0.0358191792925910' (same digits)."""
    if "E" not in s:
        return s
    mant, exp = s.split("E")
    from decimal import Decimal
    return format(Decimal(mant).scaleb(int(exp)), "f")


def write_nist_longley(res):
    write_table("longley_nist.csv", ["quantity", "term", "value"],
                [[q, t, plain_decimal(v)] for q, t, v in NIST_LONGLEY])
    worst = 0.0
    got = {"estimate": res.params, "std_error": res.bse}
    for q, t, v in NIST_LONGLEY:
        cert = float(v)
        if q in got:
            key = "Intercept" if t == "(Intercept)" else t
            val = got[q][key]
        elif q == "residual_sd":
            val = math.sqrt(res.scale)
        elif q == "r_squared":
            val = res.rsquared
        elif q == "residual_ss":
            val = res.ssr
        elif q == "regression_ss":
            val = res.ess
        elif q == "f_statistic":
            val = res.fvalue
        else:
            continue
        rel = abs(val - cert) / abs(cert)
        worst = max(worst, rel)
        if rel > 1e-8:
            note(f"  NIST longley {q} {t}: got {val!r}, certified {v}, rel {rel:.2e}")
    note(f"longley_lm vs NIST StRD certified values: largest relative difference "
         f"{worst:.3e} ({-math.log10(worst):.1f} digits)")
    assert worst < 1e-8, worst


# --------------------------------------------------------------------------
# GLMs
# --------------------------------------------------------------------------

GLM_STATS = ["family", "link", "nobs", "rows_dropped", "df_null", "df_residual",
             "null_deviance", "deviance", "dispersion", "log_likelihood", "aic",
             "bic", "iterations", "converged"]

EPS = np.finfo(float).eps


class RFamily:
    """Just enough of R's family objects to replay glm.fit's iterations."""

    def __init__(self, family, link):
        self.family, self.link = family, link

    # links -----------------------------------------------------------------
    def linkfun(self, mu):
        if self.link == "logit":
            return np.log(mu / (1 - mu))
        if self.link == "probit":
            return st.norm.ppf(mu)
        if self.link == "log":
            return np.log(mu)
        raise ValueError(self.link)

    def linkinv(self, eta):
        if self.link == "logit":
            e = np.exp(np.clip(eta, -30, 30))
            return np.where(eta < -30, EPS, np.where(eta > 30, 1 - EPS, e / (1 + e)))
        if self.link == "probit":
            thresh = -st.norm.ppf(EPS)
            return st.norm.cdf(np.clip(eta, -thresh, thresh))
        if self.link == "log":
            return np.maximum(np.exp(eta), EPS)
        raise ValueError(self.link)

    def mu_eta(self, eta):
        if self.link == "logit":
            e = np.exp(np.clip(eta, -30, 30))
            return np.where(np.abs(eta) > 30, EPS, e / (1 + e) ** 2)
        if self.link == "probit":
            return np.maximum(st.norm.pdf(eta), EPS)
        if self.link == "log":
            return np.maximum(np.exp(eta), EPS)
        raise ValueError(self.link)

    # variance, deviance, start ---------------------------------------------
    def variance(self, mu):
        return {"binomial": lambda: mu * (1 - mu), "poisson": lambda: mu,
                "Gamma": lambda: mu ** 2}[self.family]()

    def dev_resids(self, y, mu, wt):
        if self.family == "binomial":
            with np.errstate(divide="ignore", invalid="ignore"):
                a = np.where(y > 0, y * np.log(y / mu), 0.0)
                b = np.where(y < 1, (1 - y) * np.log((1 - y) / (1 - mu)), 0.0)
            return 2 * wt * (a + b)
        if self.family == "poisson":
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.where(y > 0, y * np.log(y / mu), 0.0) - (y - mu)
            return 2 * wt * r
        if self.family == "Gamma":
            return -2 * wt * (np.log(np.where(y == 0, 1.0, y / mu)) - (y - mu) / mu)
        raise ValueError(self.family)

    def mustart(self, y, wt):
        if self.family == "binomial":
            return (wt * y + 0.5) / (wt + 1)
        if self.family == "poisson":
            return y + 0.1
        return y.copy()

    def valid(self, eta, mu):
        if not np.all(np.isfinite(mu)):
            return False
        if self.family == "binomial":
            return bool(np.all((mu > 0) & (mu < 1)))
        return bool(np.all(mu > 0))


def r_glm_fit(X, y, fam, wt, offset, epsilon=1e-8, maxit=25):
    """A transcription of R's stats::glm.fit IRLS loop (no user start values).
    Returns (coef, deviance, iterations, converged)."""
    mu = fam.mustart(y, wt)
    eta = fam.linkfun(mu)
    mu = fam.linkinv(eta)
    devold = float(np.sum(fam.dev_resids(y, mu, wt)))
    coefold = None
    conv = False
    for it in range(1, maxit + 1):
        mu_eta = fam.mu_eta(eta)
        good = (wt > 0) & (mu_eta != 0)
        z = (eta - offset)[good] + (y - mu)[good] / mu_eta[good]
        w = np.sqrt(wt[good] * mu_eta[good] ** 2 / fam.variance(mu)[good])
        start = np.linalg.lstsq(X[good] * w[:, None], z * w, rcond=None)[0]
        eta = X @ start + offset
        mu = fam.linkinv(eta)
        dev = float(np.sum(fam.dev_resids(y, mu, wt)))
        # step halving as glm.fit does, on a non-finite deviance or invalid mu
        halvings = 0
        while (not math.isfinite(dev) or not fam.valid(eta, mu)) and coefold is not None:
            halvings += 1
            assert halvings < 100
            start = (start + coefold) / 2
            eta = X @ start + offset
            mu = fam.linkinv(eta)
            dev = float(np.sum(fam.dev_resids(y, mu, wt)))
        if abs(dev - devold) / (abs(dev) + 0.1) < epsilon:
            conv = True
            return start, dev, it, conv
        devold = dev
        coefold = start
    return start, dev, maxit, conv


def fit_glm(model, formula, df, family, rfam, offset_col=None):
    extra = [offset_col] if offset_col else []
    d, dropped, cols = complete_rows(formula, df, extra=extra)
    kw = {}
    offset = np.zeros(len(d))
    if offset_col:
        offset = d[offset_col].to_numpy(float)
        kw["offset"] = offset
    mod = smf.glm(formula, data=d, family=family, **kw)
    res = mod.fit(tol=1e-12, maxiter=200)
    n = len(d)
    assert int(res.nobs) == n
    if not offset_col:  # patsy's own NA handling must drop the same rows
        assert int(smf.glm(formula, data=df, family=family).nobs) == n
    X = mod.exog
    p = int(np.linalg.matrix_rank(X))
    assert p == X.shape[1]
    df_res = n - p
    assert res.df_resid == df_res

    # response in R's form: y (proportion for binomial counts) and prior weights
    endog = np.asarray(mod.endog, float)
    orig = np.asarray(mod.data.orig_endog, float)
    trials_given = rfam.family == "binomial" and orig.ndim == 2 and orig.shape[1] == 2
    if trials_given:                 # (successes, failures) -> proportion, n
        trials = np.asarray(mod.n_trials, float)
        assert np.allclose(trials, np.asarray(mod.data.orig_endog).sum(axis=1))
    else:
        trials = np.ones(n)
    y = endog                    # statsmodels stores the proportion
    wt = trials
    mu = np.asarray(res.mu, float)

    dev = float(np.sum(rfam.dev_resids(y, mu, wt)))
    assert abs(dev - res.deviance) <= 1e-9 * max(1, dev), (model, dev, res.deviance)

    # null deviance: intercept-only model with the same offset, tight fit
    null_endog = mod.data.orig_endog if trials_given else endog
    null = sm.GLM(np.asarray(null_endog, float), np.ones((n, 1)), family=family,
                  offset=offset if offset_col else None).fit(tol=1e-12, maxiter=200)
    null_dev = float(null.deviance)
    assert abs(null_dev - res.null_deviance) <= 1e-6 * null_dev, \
        (model, null_dev, res.null_deviance)

    # log-likelihood as R's logLik.glm
    if rfam.family == "binomial":
        k_succ = np.round(y * wt)
        ll = float(np.sum(st.binom.logpmf(k_succ, wt, mu)))
        dispersion = 1.0
        k = p
    elif rfam.family == "poisson":
        ll = float(np.sum(st.poisson.logpmf(y, mu)))
        dispersion = 1.0
        k = p
    elif rfam.family == "Gamma":
        phi = dev / n
        ll = float(np.sum(st.gamma.logpdf(y, a=1 / phi, scale=mu * phi)))
        dispersion = float(np.sum((y - mu) ** 2 / rfam.variance(mu))) / df_res
        assert abs(dispersion - res.scale) <= 1e-10 * dispersion
        assert abs(dispersion - res.pearson_chi2 / df_res) <= 1e-10 * dispersion
        k = p + 1
    else:
        raise ValueError(rfam.family)
    if rfam.family != "Gamma":
        assert abs(ll - res.llf) <= 1e-9 * abs(ll), (model, ll, res.llf)
    aic = -2 * ll + 2 * k
    bic = -2 * ll + math.log(n) * k

    # R's iteration count (and a cross-check of the estimates)
    rcoef, rdev, r_iter, r_conv = r_glm_fit(X, y, rfam, wt, offset)
    assert r_conv
    rel = np.max(np.abs(rcoef - res.params.to_numpy()) /
                 np.maximum(np.abs(res.params.to_numpy()), 1e-8))
    assert rel < 1e-5, (model, rel)

    params, bse = res.params, res.bse
    stat = params / bse
    if rfam.family == "Gamma":
        pval = pd.Series(2 * st.t.sf(np.abs(stat), df_res), index=params.index)
        q = st.t.ppf(0.975, df_res)
    else:
        pval = pd.Series(2 * st.norm.sf(np.abs(stat)), index=params.index)
        q = st.norm.ppf(0.975)
        ci = res.conf_int(alpha=0.05)
        assert np.allclose(ci[0], params - q * bse, rtol=1e-12, atol=0)
        assert np.allclose(pval, res.pvalues, rtol=1e-9, atol=0)
    rows = [[r_term(t), params[t], bse[t], stat[t], pval[t],
             params[t] - q * bse[t], params[t] + q * bse[t]] for t in params.index]
    write_coef(model, rows)
    write_stats(model, GLM_STATS,
                [rfam.family, rfam.link, n, dropped, n - 1, df_res, null_dev,
                 float(res.deviance), dispersion, ll, aic, bic, r_iter,
                 bool(res.converged)])
    sm_iter = res.fit_history["iteration"]
    note(f"{model}: {formula}{' offset=' + offset_col if offset_col else ''}  "
         f"n={n} dropped={dropped} deviance={res.deviance:.10g} "
         f"iterations R-style={r_iter} (statsmodels IRLS at tol 1e-12: {sm_iter}) "
         f"R-style fit vs statsmodels max rel diff {rel:.1e}"
         + (f"; statsmodels llf (Pearson scale) {res.llf:.10g} vs R logLik {ll:.10g}"
            if rfam.family == "Gamma" else ""))
    assert res.converged
    return res


# --------------------------------------------------------------------------

def main():
    versions = {
        "python": platform.python_version(),
        "statsmodels": statsmodels.__version__,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "pandas": pd.__version__,
        "patsy": patsy.__version__,
    }
    try:
        import statsmodels.formula as smformula
        versions["formula_engine"] = smformula.options.formula_engine
    except (ImportError, AttributeError):
        versions["formula_engine"] = "patsy"
    print("versions:", versions)

    longley = make_longley()
    stackloss = make_stackloss()
    grunfeld = make_grunfeld()
    synth = make_synthetic_lm()
    spector = make_spector()
    cpunish = make_cpunish()
    scotland = make_scotland()
    star98 = make_star98()
    spois = make_synthetic_poisson()

    # ---- lm
    res, _ = fit_lm("longley_lm", "totemp ~ gnpdefl + gnp + unemp + armed + pop + year",
                    longley)
    write_nist_longley(res)
    fit_lm("stackloss_lm", "stackloss ~ airflow + watertemp + acidconc", stackloss)
    fit_lm("grunfeld_lm", "invest ~ value + capital + C(firm)", grunfeld)
    fit_lm("synthetic_lm", "y ~ x1 + x2 + C(grp) + x1:C(grp)", synth)
    fit_lm("synthetic_lm_noint", "y ~ x1 + x2 - 1", synth)
    res_al, d_al = fit_lm("synthetic_lm_aliased", "y ~ x1 + x2 + x3", synth,
                          aliased=("x3",))
    # sanity: x3 really is aliased and the pinv fit with it has the same fit
    full = smf.ols("y ~ x1 + x2 + x3", data=d_al).fit()
    assert np.linalg.matrix_rank(full.model.exog) == 3
    assert np.allclose(full.fittedvalues, res_al.fittedvalues, rtol=0, atol=1e-8)

    # ---- glm
    F, L = sm.families, sm.families.links
    fit_glm("spector_logit", "grade ~ gpa + tuce + psi", spector,
            F.Binomial(link=L.Logit()), RFamily("binomial", "logit"))
    fit_glm("spector_probit", "grade ~ gpa + tuce + psi", spector,
            F.Binomial(link=L.Probit()), RFamily("binomial", "probit"))
    fit_glm("cpunish_poisson",
            "executions ~ income + perpoverty + perblack + ln_vc100k96 + south + degree",
            cpunish, F.Poisson(link=L.Log()), RFamily("poisson", "log"))
    fit_glm("scotland_gamma",
            "yes ~ coutax + unempf + mor + act + gdp + age + coutax_femaleunemp",
            scotland, F.Gamma(link=L.Log()), RFamily("Gamma", "log"))
    fit_glm("star98_binomial",
            "nabove + nbelow ~ lowinc + perasian + perblack + perhisp + pctchrt"
            " + pctyrrnd + perminte + avyrsexp + avsalk + perspenk + ptratio + pctaf",
            star98, F.Binomial(link=L.Logit()), RFamily("binomial", "logit"))
    fit_glm("synthetic_poisson", "y ~ x1 + x2 + C(g)", spois,
            F.Poisson(link=L.Log()), RFamily("poisson", "log"), offset_col="offset_log")

    (OUT / "VERSIONS.txt").write_text(
        "".join(f"{k} {v}\n" for k, v in versions.items()), encoding="utf-8")
    print("wrote", len(list(OUT.glob("*.csv"))), "CSV files to", OUT)


if __name__ == "__main__":
    main()
