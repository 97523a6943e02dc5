-- A shared table (held by the analyst, at no client) joined with the
-- federated rows inside the aggregate: every client joins its own rows with
-- the shared table and sends only the aggregate states per group.

CREATE OR REPLACE TABLE region_info (region VARCHAR, setting VARCHAR, cost_per_visit BIGINT) AS VALUES
    ('north', 'rural', 120),
    ('south', 'urban', 95),
    ('east', 'urban', 110),
    ('west', 'rural', 130);

SELECT r.setting AS setting,
       count(*) AS n,
       avg(c.systolic) AS mean_sbp,
       sum(c.visits) AS visits,
       sum(c.visits * r.cost_per_visit) AS total_cost
FROM clinic c
JOIN region_info r ON c.region = r.region
GROUP BY r.setting
ORDER BY setting;
