-- Subtotals in one query: GROUP BY ROLLUP, CUBE and GROUPING SETS. grouping(col)
-- is 1 on the rows where `col` was rolled up (its NULL means "all"), 0 otherwise.

SELECT region,
       sex,
       grouping(region) AS all_regions,
       grouping(sex) AS all_sexes,
       count(*) AS n,
       avg(systolic) AS mean_sbp
FROM clinic
GROUP BY ROLLUP (region, sex)
ORDER BY region NULLS LAST, sex NULLS LAST;

SELECT smoker,
       event,
       grouping(smoker) AS all_smoking,
       grouping(event) AS all_events,
       count(*) AS n,
       avg(age) AS mean_age
FROM clinic
GROUP BY CUBE (smoker, event)
ORDER BY smoker NULLS LAST, event NULLS LAST;

SELECT region,
       sex,
       grouping(region) AS all_regions,
       grouping(sex) AS all_sexes,
       count(*) AS n,
       avg(bmi) AS mean_bmi
FROM clinic
GROUP BY GROUPING SETS ((region), (sex), ())
ORDER BY region NULLS LAST, sex NULLS LAST;
