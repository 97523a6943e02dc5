-- Risk factors: correlation, covariance and a simple regression of blood
-- pressure on age; conditional aggregates with FILTER and with CASE inside the
-- aggregate; and a HAVING clause that keeps only groups with enough patients.

SELECT corr(age, systolic) AS corr_age_sbp,
       corr(bmi, systolic) AS corr_bmi_sbp,
       covar_samp(age, systolic) AS covar_age_sbp,
       regr_slope(systolic, age) AS sbp_per_year_of_age,
       regr_intercept(systolic, age) AS sbp_intercept,
       regr_r2(systolic, age) AS r2_age,
       regr_count(systolic, bmi) AS n_with_bmi
FROM clinic;

SELECT sex,
       count(*) AS n,
       avg(event) FILTER (WHERE smoker = 1) AS event_rate_smokers,
       avg(event) FILTER (WHERE smoker = 0) AS event_rate_non_smokers,
       count(*) FILTER (WHERE age >= 65) AS n_65_plus,
       sum(CASE WHEN bmi >= 30 THEN 1 ELSE 0 END) AS n_obese,
       avg(CASE WHEN bmi >= 30 THEN systolic END) AS mean_sbp_obese,
       avg(CASE WHEN bmi < 30 THEN systolic END) AS mean_sbp_not_obese
FROM clinic
GROUP BY sex
ORDER BY sex;

SELECT region,
       smoker,
       count(*) AS n,
       avg(visits) AS mean_visits,
       avg(age) AS mean_age
FROM clinic
GROUP BY region, smoker
HAVING count(*) >= 30
ORDER BY region, smoker;
