-- A grouped query: blood pressure by region for patients aged 40 and over.
-- Each client sends one (count, sum, sum of squares) state per region; nothing else leaves it.
SELECT region, count(*) AS n, avg(systolic) AS mean_sbp, stddev(systolic) AS sd FROM clinic WHERE age >= 40 GROUP BY region ORDER BY region;
