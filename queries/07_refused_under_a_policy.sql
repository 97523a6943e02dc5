-- What the bundled demo's disclosure policy (a worker's defaults: k = 5,
-- extremes refused) turns away, each with the reason in its error. Without a
-- policy (e.g. `fedsql --no-demo` and the files of testdata/clinic/
-- registered with CREATE FEDERATED TABLE) every statement here is answered.
-- A script stops at its first error unless told to go on, so run it as
--   fedsql -q --on-error continue -f queries/07_refused_under_a_policy.sql
-- to see every refusal (the exit code is 4: refused).

-- min and max are one patient's values (extremes=refuse).
SELECT min(age) AS min_age, max(age) AS max_age, min(bmi) AS min_bmi, max(bmi) AS max_bmi
FROM clinic;

-- A HyperLogLog's registers identify the values hashed into them.
SELECT approx_distinct(age) AS distinct_ages,
       approx_distinct(systolic) AS distinct_sbp
FROM clinic;

-- One patient's value inside a large group: the sum adds fewer than k
-- non-zero values at some clinic (min_group_rows).
SELECT sum(CASE WHEN age = 90 AND sex = 'M' THEN systolic ELSE 0 END) AS one_patient
FROM clinic;
