-- Approximate aggregates whose states are small, mergeable sketches:
-- approx_percentile_cont / approx_median (t-digest). Each client sends its
-- sketch, never its values; under a disclosure policy a site first merges
-- its centroids until each summarizes at least k values. The merged
-- sketch is an estimate, so these results may differ slightly from the same
-- functions run over all rows in one place.

SELECT approx_median(systolic) AS median_sbp,
       approx_percentile_cont(bmi, 0.9) AS p90_bmi
FROM clinic;

SELECT region,
       approx_median(age) AS median_age,
       approx_percentile_cont(systolic, 0.25) AS q1_sbp,
       approx_percentile_cont(systolic, 0.75) AS q3_sbp
FROM clinic
GROUP BY region
ORDER BY region;
