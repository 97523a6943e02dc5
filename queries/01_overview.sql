-- Overview of the demo federation `clinic`: how many patients, their average
-- and spread, over all four clients' rows as if they were one table. (The
-- exact ranges, min and max, are one patient's values: the demo's disclosure
-- policy refuses them, see 07_refused_under_a_policy.sql.)
SELECT count(*) AS n_patients,
       count(bmi) AS n_with_bmi,
       avg(age) AS mean_age,
       stddev(age) AS sd_age,
       avg(bmi) AS mean_bmi,
       avg(systolic) AS mean_sbp,
       stddev(systolic) AS sd_sbp,
       sum(event) AS n_events,
       avg(event) AS event_rate,
       sum(visits) AS total_visits
FROM clinic;
