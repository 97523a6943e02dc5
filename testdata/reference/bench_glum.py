"""Times glum's GLM on the fedsql benchmark data, as an outside anchor beside
bench_statsmodels.py (glum is the fastest Python GLM library we know of).

Usage (after `cargo run --release --bin fedsql-bench` wrote bench-data/):

    pip install glum==3.4.1 pandas pyarrow
    python3 testdata/reference/bench_glum.py [bench-data/ [runs]]

It loads the 8 client Parquet files into one in-memory table, then fits
y_logistic ~ x1..x10 (binomial) and y_poisson ~ x1..x10 (poisson) with
glum's GeneralizedLinearRegressor(family=..., alpha=0, fit_intercept=True):
unpenalized, with an intercept, glum's default solver for that problem
(solver="auto", which picks "irls-ls") and its default tolerance
(gradient_tol=1e-4). It prints the load time, the solver used, each fit's time
(median and minimum of --runs runs, after one warm-up fit), its iteration
count, and the coefficients (intercept, x1..x10) for comparison with fedsql's
`glm` output.
"""

import glob
import statistics
import sys
import time

import glum
import numpy as np
import pandas as pd
from glum import GeneralizedLinearRegressor


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else "bench-data/"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    started = time.perf_counter()
    files = sorted(glob.glob(f"{folder.rstrip('/')}/*.parquet"))
    data = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    load = time.perf_counter() - started
    xs = [f"x{i}" for i in range(1, 11)]
    exog = data[xs].to_numpy(np.float64)
    print(f"glum {glum.__version__} (numpy {np.__version__}, pandas {pd.__version__}); "
          f"{len(data)} rows from {len(files)} files loaded in {load:.2f} s")
    for family, y in [("binomial", "y_logistic"), ("poisson", "y_poisson")]:
        endog = data[y].to_numpy(np.float64)
        GeneralizedLinearRegressor(family=family, alpha=0, fit_intercept=True).fit(exog, endog)  # warm-up
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            model = GeneralizedLinearRegressor(family=family, alpha=0, fit_intercept=True).fit(exog, endog)
            times.append(time.perf_counter() - started)
        print(f"| glum GLM {family} ({model._solver}) | {statistics.median(times):.2f} s median, "
              f"{min(times):.2f} s min of {runs} (fit, data in memory; +{load:.2f} s load) "
              f"| {model.n_iter_} iterations |")
        coefs = [model.intercept_, *model.coef_]
        print("    " + ", ".join(f"{name}={value:.10g}" for name, value in zip(["(Intercept)", *xs], coefs)))


if __name__ == "__main__":
    main()
