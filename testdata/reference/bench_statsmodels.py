"""Times statsmodels' GLM on the fedsql benchmark data, for the comparison in
the README (issue: "the whole fit beats statsmodels' GLM on the same data
loaded into memory").

Usage (after `cargo run --release --bin fedsql-bench` wrote bench-data/):

    pip install statsmodels pandas pyarrow
    python3 testdata/reference/bench_statsmodels.py [bench-data/ [runs]]

It loads the 8 client Parquet files into one in-memory table, then fits
y_logistic ~ x1..x10 (binomial) and y_poisson ~ x1..x10 (poisson) with
statsmodels' GLM (IRLS, its default tolerance), and prints the load time and
each fit's time (median of --runs runs) and iteration count.
"""

import glob
import statistics
import sys
import time

import numpy as np
import pandas as pd
import statsmodels.api as sm


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else "bench-data/"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    started = time.perf_counter()
    files = sorted(glob.glob(f"{folder.rstrip('/')}/*.parquet"))
    data = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    load = time.perf_counter() - started
    xs = [f"x{i}" for i in range(1, 11)]
    exog = sm.add_constant(data[xs].to_numpy(np.float64))
    print(f"statsmodels {sm.__version__}; {len(data)} rows from {len(files)} files loaded in {load:.2f} s")
    for family, y in [(sm.families.Binomial(), "y_logistic"), (sm.families.Poisson(), "y_poisson")]:
        endog = data[y].to_numpy(np.float64)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            result = sm.GLM(endog, exog, family=family).fit()
            times.append(time.perf_counter() - started)
        name = type(family).__name__.lower()
        print(f"| statsmodels GLM {name} | {statistics.median(times):.2f} s (fit, data in memory; +{load:.2f} s load) "
              f"| {result.fit_history['iteration']} iterations |")


if __name__ == "__main__":
    main()
