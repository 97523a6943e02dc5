-- Overview of the demo federation `clinic`: how many patients, their average
-- and spread, and the ranges, over all four clients' rows as if they were one table.
SELECT count(*) AS n_patients,
       count(bmi) AS n_with_bmi,
       avg(age) AS mean_age,
       stddev(age) AS sd_age,
       min(age) AS min_age,
       max(age) AS max_age,
       avg(bmi) AS mean_bmi,
       min(bmi) AS min_bmi,
       max(bmi) AS max_bmi,
       avg(systolic) AS mean_sbp,
       stddev(systolic) AS sd_sbp,
       sum(event) AS n_events,
       avg(event) AS event_rate,
       sum(visits) AS total_visits
FROM clinic;
