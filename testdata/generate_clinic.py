#!/usr/bin/env python3
"""Generate the bundled demo federation: four clinics' patient records.

Writes testdata/clinic/{hospital_a,hospital_b,hospital_c,clinic_d}.csv, one
file per client of the federated table `clinic`. Python 3 standard library
only, seeded, so every run writes byte-identical files:

    python3 testdata/generate_clinic.py

Columns (in this order):
    region    north/south/east/west; each client has its own mix
    age       integer 18-90; each client has its own age profile
    sex       F/M
    bmi       float with one decimal; about 3% empty (NULL)
    systolic  integer blood pressure, rising with age, bmi and smoking
    smoker    0/1
    event     0/1, drawn from a logistic model of age, bmi and smoking
    visits    count, Poisson with a log-linear mean in age and smoking

The true (latent) bmi drives systolic and event even where the recorded bmi
is missing, as it would in real data.
"""

import math
import os
import random

SEED = 20240611

REGIONS = ("north", "south", "east", "west")

# name, rows, region weights (north, south, east, west), mean age, sd age,
# share female, smoking rate.
CLIENTS = (
    ("hospital_a", 400, (0.55, 0.15, 0.20, 0.10), 58.0, 15.0, 0.52, 0.22),
    ("hospital_b", 280, (0.10, 0.60, 0.10, 0.20), 52.0, 17.0, 0.48, 0.28),
    ("hospital_c", 220, (0.20, 0.20, 0.40, 0.20), 63.0, 13.0, 0.55, 0.26),
    ("clinic_d", 160, (0.20, 0.20, 0.20, 0.40), 48.0, 14.0, 0.55, 0.36),
)

BMI_MISSING_RATE = 0.03

HEADER = "region,age,sex,bmi,systolic,smoker,event,visits"


def clamp(value, low, high):
    return max(low, min(high, value))


def poisson(rng, mean):
    """Knuth's multiplication method; fine for the small means used here."""
    limit = math.exp(-mean)
    k = 0
    product = rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


def patient(rng, weights, mean_age, sd_age, share_female, smoking_rate):
    region = rng.choices(REGIONS, weights=weights)[0]
    age = int(clamp(round(rng.gauss(mean_age, sd_age)), 18, 90))
    sex = "F" if rng.random() < share_female else "M"
    smoker = 1 if rng.random() < smoking_rate else 0
    bmi = round(clamp(rng.gauss(26.5 + 0.04 * (age - 50), 4.5), 16.0, 48.0), 1)
    systolic = int(round(
        clamp(98 + 0.55 * age + 0.9 * (bmi - 25) + 5 * smoker + rng.gauss(0, 11), 85, 220)
    ))
    logit = -7.2 + 0.065 * age + 0.07 * bmi + 0.8 * smoker
    event = 1 if rng.random() < 1 / (1 + math.exp(-logit)) else 0
    visits = poisson(rng, math.exp(0.1 + 0.016 * age + 0.35 * smoker))
    recorded_bmi = "" if rng.random() < BMI_MISSING_RATE else f"{bmi:.1f}"
    return f"{region},{age},{sex},{recorded_bmi},{systolic},{smoker},{event},{visits}"


# The demo teaches under a worker's default disclosure policy (k = 5): every
# cell that the README and queries/ aggregate over holds 0 or at least K rows
# at every site, and so does every input that those aggregates add (events,
# smokers, non-zero visits). A drawn site that misses one is drawn again.
K = 5


def parse(line):
    region, age, sex, bmi, systolic, smoker, event, visits = line.split(",")
    return dict(region=region, age=int(age), sex=sex, bmi=float(bmi) if bmi else None,
                systolic=int(systolic), smoker=int(smoker), event=int(event), visits=int(visits))


def disclosure_failures(rows):
    """The cells (and added inputs) that hold 1 to K-1 rows."""
    failures = []

    def cell(name, pred, inputs=()):
        chosen = [r for r in rows if pred(r)]
        counts = [(name, len(chosen))]
        counts += [(f"{name}/{what}", sum(1 for r in chosen if test(r))) for what, test in inputs]
        failures.extend((n, c) for n, c in counts if 0 < c < K)

    added = (("event", lambda r: r["event"] == 1), ("visits", lambda r: r["visits"] != 0),
             ("smoker", lambda r: r["smoker"] == 1))
    cell("all", lambda r: True, added)
    for region in REGIONS:
        cell(region, lambda r: r["region"] == region, added)
        cell(f"{region}/age>=40", lambda r: r["region"] == region and r["age"] >= 40)
        for smoker in (0, 1):
            cell(f"{region}/smoker={smoker}",
                 lambda r: r["region"] == region and r["smoker"] == smoker, added[1:2])
        for sex in "FM":
            cell(f"{region}/{sex}", lambda r: r["region"] == region and r["sex"] == sex)
    for sex in "FM":
        cell(sex, lambda r: r["sex"] == sex,
             (("65+", lambda r: r["age"] >= 65),
              ("obese", lambda r: r["bmi"] is not None and r["bmi"] >= 30),
              ("not obese", lambda r: r["bmi"] is not None and r["bmi"] < 30)))
        for smoker in (0, 1):
            cell(f"{sex}/smoker={smoker}",
                 lambda r: r["sex"] == sex and r["smoker"] == smoker, added[:1])
    for smoker in (0, 1):
        for event in (0, 1):
            cell(f"smoker={smoker}/event={event}",
                 lambda r: r["smoker"] == smoker and r["event"] == event)
    return failures


def main():
    rng = random.Random(SEED)
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clinic")
    os.makedirs(out_dir, exist_ok=True)
    for name, rows, weights, mean_age, sd_age, share_female, smoking_rate in CLIENTS:
        for attempt in range(1, 10_001):
            records = [patient(rng, weights, mean_age, sd_age, share_female, smoking_rate)
                       for _ in range(rows)]
            if not disclosure_failures([parse(r) for r in records]):
                break
        else:
            raise SystemExit(f"{name}: no draw meets the disclosure cells")
        lines = [HEADER] + records
        path = os.path.join(out_dir, f"{name}.csv")
        with open(path, "w", encoding="ascii", newline="\n") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {path} ({rows} rows, draw {attempt})")


if __name__ == "__main__":
    main()
