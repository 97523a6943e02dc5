#!/usr/bin/env python3
"""Writes testdata/visits/: the README's example federation of clinic visits,
three clients (one Parquet file each), Python 3 standard library only, fixed
seed. The rows are made here as CSV and turned into Parquet by fedsql itself:

    cargo build && python3 testdata/generate_visits.py target/debug/fedsql

It also writes testdata/visits_west/, one more client as a folder of two
CSV files (2025.csv, 2026.csv) with the same columns, for the README's
example of clients named one by one, mixing Parquet files and a folder.

Columns: region (text), age (integer), sex (F/M), reason (checkup, chronic,
injury, acute), cost (float, 2 decimals; about 5% empty = NULL), followup (0/1).
"""

import csv
import os
import random
import subprocess
import sys
import tempfile

CLIENTS = [("north_clinic", 60, "north"), ("south_clinic", 45, "south"), ("east_clinic", 30, "east")]
REASONS = ["checkup", "chronic", "injury", "acute"]


def rows(rng, n, home):
    for _ in range(n):
        region = home if rng.random() < 0.8 else rng.choice(["north", "south", "east", "west"])
        age = rng.randint(18, 90)
        reason = rng.choice(REASONS)
        base = {"checkup": 80, "chronic": 220, "injury": 310, "acute": 450}[reason]
        cost = round(base + 1.5 * age + rng.gauss(0, 40), 2)
        followup = 1 if rng.random() < (0.2 + 0.004 * age) else 0
        yield [region, age, rng.choice("FM"), reason, "" if rng.random() < 0.05 else f"{cost:.2f}", followup]


def main():
    fedsql = sys.argv[1] if len(sys.argv) > 1 else "fedsql"
    rng = random.Random(19)
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "visits")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, n, home in CLIENTS:
            path = os.path.join(tmp, f"{name}.csv")
            with open(path, "w", newline="") as f:
                w = csv.writer(f, lineterminator="\n")
                w.writerow(["region", "age", "sex", "reason", "cost", "followup"])
                w.writerows(rows(rng, n, home))
            target = os.path.join(out_dir, f"{name}.parquet")
            sql = (
                f"CREATE EXTERNAL TABLE {name} (region VARCHAR NOT NULL, age INT NOT NULL, "
                f"sex VARCHAR NOT NULL, reason VARCHAR NOT NULL, cost DOUBLE, followup INT NOT NULL) "
                f"STORED AS CSV LOCATION '{path}' OPTIONS ('format.has_header' 'true'); "
                f"COPY {name} TO '{target}' STORED AS PARQUET"
            )
            subprocess.run([fedsql, "-q", "-X", "--no-demo", "-c", sql], check=True, stdout=subprocess.DEVNULL)
    west = os.path.join(os.path.dirname(out_dir), "visits_west")
    os.makedirs(west, exist_ok=True)
    for year, n in [("2025", 12), ("2026", 10)]:
        with open(os.path.join(west, f"{year}.csv"), "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["region", "age", "sex", "reason", "cost", "followup"])
            w.writerows(rows(rng, n, "west"))


if __name__ == "__main__":
    main()
