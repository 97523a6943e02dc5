//! `lmm`, `lmm_varcomp`, `lmm_stats`, `lmm_ranef`: linear mixed models
//! with lme4's formula syntax, exact in one federated round.
//!
//! ```sql
//! SELECT * FROM lmm('clinic', 'systolic ~ age + bmi + (1 | _client)');
//! SELECT * FROM lmm_varcomp('clinic', 'systolic ~ age + (1 + age | _client)');
//! SELECT * FROM lmm_stats('wards', 'y ~ x + (1 | ward)', 'reml=false');
//! ```
//!
//! The grouping column is `_client` (a random effect per site) or a column
//! whose levels lie within sites. The REML and ML criteria of a linear
//! mixed model depend on the data only through per-group cross-products,
//! so one round of `centered_moments(y, x…, z…) GROUP BY group` (n, means
//! and centred cross products per group, whatever the rows) is all that
//! leaves the sites; the coordinator then minimises the profiled criterion
//! over the relative covariance factor θ as lme4 does ([`pls`]), with no
//! further round per optimizer step. A site releases a group's state only
//! under its disclosure policy (at least its minimum rows per group).

pub(crate) mod docs;
mod output;
pub(crate) mod pls;
mod spec;

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use fedsql_udfs::normal_equations::INTERCEPT;
use nalgebra::{DMatrix, DVector};

use self::pls::{GroupMoments, Moments};
pub(crate) use self::spec::{LmmFit, LmmOutput, LmmSpec, USAGE};
use super::source::{complete_cases, learn_levels, string_arguments};
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::{Response, design_columns, missing_column, quote_ident};
use crate::table_function::arguments::{argument_error, invalid_argument};
use crate::table_function::deferred::{Rounds, deferred_table};

/// The table functions `lmm`, `lmm_varcomp`, `lmm_stats` and `lmm_ranef`.
#[derive(Debug)]
pub(crate) struct LmmFunction {
    pub output: LmmOutput,
}

impl TableFunctionImpl for LmmFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let name = self.output.name();
        let strings = string_arguments(name, USAGE, args.exprs(), 2)?;
        if strings.len() > 3 {
            return Err(invalid_argument(
                name,
                format!("{name} takes 2 or 3 arguments; usage: {USAGE}"),
            ));
        }
        let spec = LmmSpec::parse(&strings).map_err(|e| argument_error(name, e))?;
        let label = format!("{name}('{}', '{}')", spec.source.given, spec.text);
        let output = self.output;
        Ok(deferred_table(
            label,
            output::schema(output),
            Rounds::Independent,
            None,
            move |ctx, _| {
                let spec = spec.clone();
                Box::pin(async move {
                    let fit = fit(&ctx, &spec).await?;
                    if output == LmmOutput::FixedEffects {
                        ctx.push_summary(output::printed_summary(&spec, &fit));
                    }
                    output::batch(output, &spec, &fit)
                })
            },
        ))
    }
}

/// The columns the round computes moments of, after `y`: the fixed
/// effects' then any random effect's not among them; and where each
/// design column of X and Z sits in the moment matrix of [1, y, columns].
struct MomentColumns {
    sql: Vec<String>,
    x: Vec<usize>,
    z: Vec<usize>,
    x_names: Vec<String>,
    z_names: Vec<String>,
}

async fn moment_columns(ctx: &FedContext, spec: &LmmSpec) -> Result<MomentColumns> {
    let schema = spec.source.schema(ctx).await?;
    let fixed = spec.fixed.expand_dot(&schema);
    let mut factors = fixed.factors(&schema)?;
    for f in spec.random.factors(&schema)? {
        if !factors.contains(&f) {
            factors.push(f);
        }
    }
    // One levels round for the factors of both parts.
    let mut both = fixed.clone();
    both.terms.extend(spec.random.terms.iter().cloned());
    let levels = learn_levels(ctx, &spec.source, &both, &factors).await?;
    let mut columns = MomentColumns {
        sql: Vec::new(),
        x: Vec::new(),
        z: Vec::new(),
        x_names: Vec::new(),
        z_names: Vec::new(),
    };
    // Index 0 is the constant 1, index 1 the response.
    let place =
        |sql: &str, columns: &mut MomentColumns| match columns.sql.iter().position(|s| s == sql) {
            Some(i) => i + 2,
            None => {
                columns.sql.push(sql.to_string());
                columns.sql.len() + 1
            }
        };
    if fixed.intercept {
        columns.x.push(0);
        columns.x_names.push(INTERCEPT.into());
    }
    for c in design_columns(&fixed, &schema, &levels)? {
        let at = place(&c.sql, &mut columns);
        columns.x.push(at);
        columns.x_names.push(c.name);
    }
    if spec.random.intercept {
        columns.z.push(0);
        columns.z_names.push(INTERCEPT.into());
    }
    for c in design_columns(&spec.random, &schema, &levels)? {
        let at = place(&c.sql, &mut columns);
        columns.z.push(at);
        columns.z_names.push(c.name);
    }
    if columns.z.is_empty() {
        return Err(FedError::InvalidArgument(format!(
            "formula '{}': the random-effect term has no effect",
            spec.text
        )));
    }
    if schema.field_with_name(&spec.group).is_err() {
        return Err(missing_column(&spec.group, &schema));
    }
    Ok(columns)
}

/// The one round: per group, n, means and centred cross-products of
/// (y, columns).
fn round_sql(spec: &LmmSpec, columns: &MomentColumns) -> String {
    let Response::Column(y) = &spec.fixed.response else {
        unreachable!("parse checks the response")
    };
    let mut arguments = vec![format!("CAST({} AS DOUBLE)", quote_ident(y))];
    arguments.extend(columns.sql.iter().cloned());
    let mut used = spec.fixed.columns();
    for c in spec.random.columns() {
        if !used.contains(&c) {
            used.push(c);
        }
    }
    used.push(spec.group.clone());
    format!(
        "SELECT CAST({g} AS VARCHAR) AS grp, centered_moments({args}) AS m FROM {from} WHERE {complete} GROUP BY {g}",
        g = quote_ident(&spec.group),
        args = arguments.join(", "),
        from = spec.source.from,
        complete = complete_cases(&used),
    )
}

/// The raw cross-products of [1, y, columns] from a co-moment state.
fn raw_cross_products(n: f64, mean: &[f64], m2: &[Vec<f64>]) -> DMatrix<f64> {
    let d = mean.len() + 1;
    DMatrix::from_fn(d, d, |i, j| match (i, j) {
        (0, 0) => n,
        (0, j) => n * mean[j - 1],
        (i, 0) => n * mean[i - 1],
        (i, j) => m2[i - 1][j - 1] + n * mean[i - 1] * mean[j - 1],
    })
}

/// Runs the round and fits the model.
pub(crate) async fn fit(ctx: &FedContext, spec: &LmmSpec) -> Result<LmmFit> {
    let columns = moment_columns(ctx, spec).await?;
    let sql = round_sql(spec, &columns);
    let batches = ctx.sql(&sql).await?.collect().await?;
    let (p, q) = (columns.x.len(), columns.z.len());
    let mut moments = Moments {
        groups: Vec::new(),
        n: 0.0,
        xtx: DMatrix::zeros(p, p),
        xty: DVector::zeros(p),
        yty: 0.0,
    };
    for batch in &batches {
        let groups = datafusion::arrow::compute::cast(batch.column(0), &DataType::Utf8)?;
        let groups = groups.as_string::<i32>();
        let states = batch.column(1).as_struct();
        for row in 0..batch.num_rows() {
            if groups.is_null(row) {
                continue;
            }
            let (_, state) = fedsql_udfs::centered_moments::read(states, row)?;
            if state.n == 0 {
                continue;
            }
            let n = state.n as f64;
            let mean: Vec<f64> = state.mean.iter().copied().collect();
            let m2: Vec<Vec<f64>> = state.m2.rows().into_iter().map(|r| r.to_vec()).collect();
            let s = raw_cross_products(n, &mean, &m2);
            let x = |i: usize, j: usize| s[(columns.x[i], columns.x[j])];
            moments.n += n;
            moments.yty += s[(1, 1)];
            for i in 0..p {
                moments.xty[i] += s[(columns.x[i], 1)];
                for j in 0..p {
                    moments.xtx[(i, j)] += x(i, j);
                }
            }
            moments.groups.push(GroupMoments {
                level: groups.value(row).to_string(),
                ztz: DMatrix::from_fn(q, q, |a, b| s[(columns.z[a], columns.z[b])]),
                ztx: DMatrix::from_fn(q, p, |a, j| s[(columns.z[a], columns.x[j])]),
                zty: DVector::from_fn(q, |a, _| s[(columns.z[a], 1)]),
            });
        }
    }
    moments.groups.sort_by(|a, b| a.level.cmp(&b.level));
    if moments.groups.is_empty() {
        return Err(FedError::InvalidArgument(format!(
            "lmm: no complete rows in '{}'",
            spec.source.given
        )));
    }
    if moments.n <= p as f64 {
        return Err(FedError::InvalidArgument(format!(
            "lmm: {} rows for {p} fixed effects",
            moments.n
        )));
    }
    let (theta, criterion, evaluations) = pls::optimise(&moments, q, spec.reml);
    let solution = pls::solve(&moments, &theta, q).ok_or_else(|| {
        FedError::InvalidArgument("lmm: the fixed effects are collinear (X'X is singular)".into())
    })?;
    let df = if spec.reml {
        moments.n - p as f64
    } else {
        moments.n
    };
    let sigma = (solution.pwrss / df).sqrt();
    Ok(LmmFit {
        fixed_terms: columns.x_names,
        random_terms: columns.z_names,
        levels: moments.groups.iter().map(|g| g.level.clone()).collect(),
        theta,
        solution,
        criterion,
        sigma,
        nobs: moments.n,
        evaluations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<LmmSpec> {
        LmmSpec::parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn parses_lme4_formulas_and_options() {
        let spec = parse(&[
            "clinic",
            "systolic ~ age + (1 + age | _client)",
            "reml=false",
        ])
        .unwrap();
        assert_eq!(spec.group, "_client");
        assert!(!spec.reml);
        assert!(spec.random.intercept);
        assert_eq!(spec.random.terms.len(), 1);
        let slope = parse(&["clinic", "systolic ~ age + (0 + age | _client)"]).unwrap();
        assert!(!slope.random.intercept && slope.reml);
    }

    #[test]
    fn what_is_not_supported_is_named() {
        for (args, expected) in [
            (vec!["t", "y ~ x"], "no random-effect term"),
            (
                vec!["t", "y ~ x + (1 | a) + (1 | b)"],
                "one random-effect term",
            ),
            (vec!["t", "y ~ x + (1 | a)", "optimizer=x"], "reml"),
        ] {
            let e = parse(&args).unwrap_err().to_string();
            assert!(e.contains(expected), "{args:?}: {e}");
        }
    }

    #[test]
    fn raw_cross_products_come_back_from_centred_moments() {
        // Rows (y, x): (1, 2), (3, 5): n 2, means (2, 3.5), M2.
        let m2 = vec![vec![2.0, 3.0], vec![3.0, 4.5]];
        let s = raw_cross_products(2.0, &[2.0, 3.5], &m2);
        assert_eq!(s[(0, 0)], 2.0);
        assert_eq!(s[(0, 1)], 4.0);
        assert_eq!(s[(1, 1)], 10.0);
        assert_eq!(s[(1, 2)], 17.0);
        assert_eq!(s[(2, 2)], 29.0);
    }
}
