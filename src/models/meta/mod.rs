//! `lm_meta`, `glm_meta`, `coxph_meta`: study-level meta-analysis of
//! per-site fits, as DataSHIELD's `ds.glmSLMA` with R's `metafor`.
//!
//! ```sql
//! SELECT * FROM lm_meta('clinic', 'systolic ~ age + bmi');
//! SELECT * FROM glm_meta('clinic', 'event ~ age + smoker', 'binomial', 'method=DL, test=knha');
//! SELECT * FROM coxph_meta('lung', 'Surv(time, status) ~ age + sex');
//! ```
//!
//! Each site's fit is the ordinary federated fit over that site alone
//! ([`one_site`]), so the site applies its own disclosure policy to it
//! (minimum rows, parameter ratio) exactly as to any fit; a site whose fit
//! is refused, fails or does not converge is left out with a notice naming
//! it. The coordinator then pools each term's per-site estimates and
//! standard errors ([`pooling`]) as `metafor::rma(yi, sei = se, method)`.
//! The result is long: per term, one `site` row per site kept, a `fixed`
//! row (the inverse-variance model) and, unless `method=FE`, a `random` row.

mod analysis;
pub(crate) mod docs;
mod one_site;
pub(crate) mod pooling;
pub(crate) mod print;

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use fedsql_udfs::distribution::{normal_quantile, normal_sf};

pub(crate) use self::analysis::{Analysis, MetaModel, MetaOptions, TermAnalysis};
use self::one_site::SourceSites;
use self::pooling::{Method, Pooled, Test, pool};
use super::coxph::CoxSpec;
use super::glm::GlmSpec;
use super::source::{ModelSource, string_arguments};
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::{Formula, Response};
use crate::table_function::arguments::{argument_error, invalid_argument};
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::options::{Options, unknown_option};

/// The options every meta-analysis takes (its model's come after them).
const META_OPTIONS: &[&str] = &["method", "level", "test"];

/// What is fitted at each site.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per call
enum SiteModel {
    Lm(ModelSource, Formula),
    Glm(Box<GlmSpec>),
    Coxph(Box<CoxSpec>),
}

impl SiteModel {
    fn source(&self) -> &ModelSource {
        match self {
            SiteModel::Lm(source, _) => source,
            SiteModel::Glm(spec) => &spec.source,
            SiteModel::Coxph(spec) => &spec.source,
        }
    }
}

/// A parsed call.
#[derive(Debug, Clone)]
struct MetaSpec {
    model: SiteModel,
    options: MetaOptions,
}

/// Splits an options string into the meta-analysis's and the model's.
fn split_options(model: MetaModel, text: Option<&str>) -> Result<(MetaOptions, Option<String>)> {
    let mut options = MetaOptions {
        method: Method::Reml,
        level: 0.95,
        test: Test::Z,
    };
    let mut rest = Vec::new();
    let mut valid: Vec<&str> = META_OPTIONS.to_vec();
    valid.extend(model.model_options());
    for option in &Options::parse_any(text)? {
        match option.key.as_str() {
            "method" => {
                options.method = Method::parse(&option.value).ok_or_else(|| {
                    FedError::InvalidArgument(format!(
                        "{}: method `{}`: expected REML, DL, PM or FE",
                        model.name(),
                        option.value
                    ))
                })?
            }
            "level" => {
                let level = option.number()?;
                if !(level > 0.0 && level < 1.0) {
                    return Err(FedError::InvalidArgument(format!(
                        "{}: level must lie between 0 and 1, not {level}",
                        model.name()
                    )));
                }
                options.level = level;
            }
            "test" => {
                options.test = match option.value.to_ascii_lowercase().as_str() {
                    "z" => Test::Z,
                    "knha" | "hksj" => Test::KnappHartung,
                    other => {
                        return Err(FedError::InvalidArgument(format!(
                            "{}: test `{other}`: expected z or knha",
                            model.name()
                        )));
                    }
                }
            }
            key if model.model_options().contains(&key) => {
                rest.push(format!("{}={}", option.key, option.value))
            }
            key => return Err(unknown_option(model.name(), key, &valid)),
        }
    }
    Ok((options, (!rest.is_empty()).then(|| rest.join(", "))))
}

impl MetaSpec {
    fn parse(model: MetaModel, args: &[String]) -> Result<Self> {
        let fixed = if model == MetaModel::Glm { 3 } else { 2 };
        if !(fixed..=fixed + 1).contains(&args.len()) {
            return Err(FedError::InvalidArgument(format!(
                "{} takes {fixed} or {} arguments; usage: {}",
                model.name(),
                fixed + 1,
                model.usage()
            )));
        }
        let (options, rest) = split_options(model, args.get(fixed).map(String::as_str))?;
        let mut model_args: Vec<String> = args[..fixed].to_vec();
        model_args.extend(rest);
        let model = match model {
            MetaModel::Lm => {
                let formula = Formula::parse(&args[1])?;
                if formula.offset.is_some() || matches!(formula.response, Response::Counts { .. }) {
                    return Err(FedError::InvalidArgument(
                        "offset() and cbind() belong to glm formulas (glm_meta)".into(),
                    ));
                }
                SiteModel::Lm(ModelSource::parse(&args[0]), formula)
            }
            MetaModel::Glm => SiteModel::Glm(Box::new(GlmSpec::parse(&model_args)?)),
            MetaModel::Coxph => SiteModel::Coxph(Box::new(CoxSpec::parse(&model_args)?)),
        };
        Ok(Self { model, options })
    }
}

/// The table functions `lm_meta`, `glm_meta` and `coxph_meta`.
#[derive(Debug)]
pub(crate) struct MetaFunction {
    pub model: MetaModel,
}

impl TableFunctionImpl for MetaFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let (model, name) = (self.model, self.model.name());
        let max = if model == MetaModel::Glm { 4 } else { 3 };
        let strings = string_arguments(name, model.usage(), args.exprs(), 2)?;
        if strings.len() > max {
            return Err(invalid_argument(
                name,
                format!(
                    "{name} takes at most {max} arguments; usage: {}",
                    model.usage()
                ),
            ));
        }
        let spec = MetaSpec::parse(model, &strings).map_err(|e| argument_error(name, e))?;
        let label = format!("{name}('{}', '{}')", spec.model.source().given, strings[1]);
        let call = print::r_call(model, &strings, &spec.options);
        let rounds = if model == MetaModel::Lm {
            Rounds::Independent
        } else {
            Rounds::Iterative
        };
        Ok(deferred_table(
            label,
            schema(),
            rounds,
            None,
            move |ctx, _| {
                let (spec, call) = (spec.clone(), call.clone());
                Box::pin(async move {
                    let analysis = analyse(&ctx, model, &spec).await?;
                    ctx.push_summary(print::printed_summary(&analysis, call));
                    analysis.batch()
                })
            },
        ))
    }
}

/// One site's estimates.
#[derive(Debug, Clone)]
struct SiteFit {
    site: String,
    terms: Vec<String>,
    estimate: Vec<Option<f64>>,
    std_error: Vec<Option<f64>>,
}

/// Fits the model at each site; the sites left out come back as notices.
async fn site_fits(ctx: &FedContext, model: MetaModel, spec: &MetaSpec) -> Result<Vec<SiteFit>> {
    let name = model.name();
    let sites = SourceSites::of(ctx, spec.model.source(), name).await?;
    let mut fits = Vec::new();
    for (index, site) in sites.names().into_iter().enumerate() {
        let at = sites.at(ctx, index)?;
        let fitted = match &spec.model {
            SiteModel::Lm(source, formula) => {
                super::lm::fit(&at, source, formula, &Default::default())
                    .await
                    .map(|f| (f.ols.terms, f.ols.estimate, f.ols.std_error, true))
            }
            SiteModel::Glm(glm) => super::glm::fit(&at, glm, None)
                .await
                .map(|f| (f.terms, f.estimate, f.std_error, f.converged)),
            SiteModel::Coxph(cox) => super::coxph::fit(&at, cox)
                .await
                .map(|f| (f.terms, f.beta, f.std_error, f.converged)),
        };
        match fitted {
            Ok((_, _, std_error, true)) if std_error.iter().all(Option::is_none) => {
                ctx.notice(format!(
                    "{name}: site `{site}` left out: no term has a standard error (too few rows for the model)"
                ))
            }
            Ok((terms, estimate, std_error, true)) => fits.push(SiteFit {
                site,
                terms,
                estimate,
                std_error,
            }),
            Ok(_) => ctx.notice(format!(
                "{name}: site `{site}` left out: its {} fit did not converge",
                model.r_function()
            )),
            Err(e) => ctx.notice(format!("{name}: site `{site}` left out: {e}")),
        }
    }
    if fits.is_empty() {
        return Err(FedError::InvalidArgument(format!(
            "{name}: no site's fit could be used (see the notices)"
        )));
    }
    Ok(fits)
}

async fn analyse(ctx: &FedContext, model: MetaModel, spec: &MetaSpec) -> Result<Analysis> {
    let fits = site_fits(ctx, model, spec).await?;
    let mut order: Vec<String> = Vec::new();
    for fit in &fits {
        for term in &fit.terms {
            if !order.contains(term) {
                order.push(term.clone());
            }
        }
    }
    let options = spec.options;
    let mut terms = Vec::new();
    for term in order {
        let mut sites = Vec::new();
        for fit in &fits {
            let Some(i) = fit.terms.iter().position(|t| *t == term) else {
                continue;
            };
            match (fit.estimate[i], fit.std_error[i]) {
                (Some(b), Some(se)) if se > 0.0 && se.is_finite() => {
                    sites.push((fit.site.clone(), b, se))
                }
                _ => ctx.notice(format!(
                    "{}: `{term}` is not estimable at site `{}` (aliased or without a standard error); pooled without it",
                    model.name(),
                    fit.site
                )),
            }
        }
        if sites.is_empty() {
            continue;
        }
        let y: Vec<f64> = sites.iter().map(|s| s.1).collect();
        let se: Vec<f64> = sites.iter().map(|s| s.2).collect();
        let fixed = pool(&y, &se, Method::FixedEffect, options.test, options.level);
        let random = (options.method != Method::FixedEffect)
            .then(|| pool(&y, &se, options.method, options.test, options.level));
        terms.push(TermAnalysis {
            term,
            sites,
            fixed,
            random,
        });
    }
    Ok(Analysis { options, terms })
}

/// The columns of a meta-analysis.
pub(crate) fn schema() -> SchemaRef {
    let float = |n: &str| Field::new(n, DataType::Float64, true);
    Arc::new(Schema::new(vec![
        Field::new("term", DataType::Utf8, false),
        Field::new("level", DataType::Utf8, false),
        Field::new("site", DataType::Utf8, true),
        float("estimate"),
        float("std_error"),
        float("statistic"),
        float("p_value"),
        float("conf_low"),
        float("conf_high"),
        float("weight"),
        float("tau2"),
        float("i2"),
        float("q"),
        Field::new("q_df", DataType::Int64, true),
        float("q_p_value"),
    ]))
}

#[derive(Default)]
struct Columns {
    term: Vec<String>,
    level: Vec<&'static str>,
    site: Vec<Option<String>>,
    numbers: [Vec<Option<f64>>; 11],
    q_df: Vec<Option<i64>>,
}

impl Columns {
    fn pooled(&mut self, term: &str, level: &'static str, p: &Pooled) {
        self.term.push(term.to_string());
        self.level.push(level);
        self.site.push(None);
        let values = [
            p.estimate,
            p.std_error,
            p.statistic,
            p.p_value,
            p.conf_low,
            p.conf_high,
            100.0,
            p.tau2,
            p.i2,
            p.q,
            p.q_p_value,
        ];
        for (column, v) in self.numbers.iter_mut().zip(values) {
            column.push(Some(v));
        }
        self.q_df.push(Some(p.q_df as i64));
    }
}

impl Analysis {
    fn batch(&self) -> Result<RecordBatch> {
        let z = normal_quantile(1.0 - (1.0 - self.options.level) / 2.0);
        let mut c = Columns::default();
        for t in &self.terms {
            for (i, (site, b, se)) in t.sites.iter().enumerate() {
                c.term.push(t.term.clone());
                c.level.push("site");
                c.site.push(Some(site.clone()));
                let statistic = b / se;
                let values = [
                    Some(*b),
                    Some(*se),
                    Some(statistic),
                    Some(2.0 * normal_sf(statistic.abs())),
                    Some(b - z * se),
                    Some(b + z * se),
                    Some(t.main().weights[i]),
                    None,
                    None,
                    None,
                    None,
                ];
                for (column, v) in c.numbers.iter_mut().zip(values) {
                    column.push(v);
                }
                c.q_df.push(None);
            }
            c.pooled(&t.term, "fixed", &t.fixed);
            if let Some(random) = &t.random {
                c.pooled(&t.term, "random", random);
            }
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(c.term)),
            Arc::new(StringArray::from(c.level)),
            Arc::new(StringArray::from(c.site)),
        ];
        let [
            estimate,
            std_error,
            statistic,
            p_value,
            low,
            high,
            weight,
            tau2,
            i2,
            q,
            q_p,
        ] = c.numbers;
        for column in [
            estimate, std_error, statistic, p_value, low, high, weight, tau2, i2, q,
        ] {
            columns.push(Arc::new(Float64Array::from(column)));
        }
        columns.push(Arc::new(Int64Array::from(c.q_df)));
        columns.push(Arc::new(Float64Array::from(q_p)));
        Ok(RecordBatch::try_new(schema(), columns)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(model: MetaModel, args: &[&str]) -> Result<MetaSpec> {
        MetaSpec::parse(
            model,
            &args.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
    }

    #[test]
    fn options_split_between_the_pooling_and_the_model() {
        let spec = parse(
            MetaModel::Glm,
            &[
                "clinic",
                "event ~ age",
                "binomial",
                "method=dl, maxit=50, test=knha, level=0.9",
            ],
        )
        .unwrap();
        assert_eq!(spec.options.method, Method::DerSimonianLaird);
        assert_eq!(spec.options.test, Test::KnappHartung);
        assert_eq!(spec.options.level, 0.9);
        let SiteModel::Glm(glm) = spec.model else {
            panic!("a glm")
        };
        assert_eq!(glm.maxit, 50);
        let defaults = parse(MetaModel::Lm, &["clinic", "systolic ~ age"]).unwrap();
        assert_eq!(defaults.options.method, Method::Reml);
        assert_eq!(defaults.options.test, Test::Z);
    }

    #[test]
    fn bad_options_are_named() {
        let e = parse(MetaModel::Lm, &["clinic", "y ~ x", "method=ML"]).unwrap_err();
        assert!(e.to_string().contains("REML, DL, PM or FE"), "{e}");
        let e = parse(MetaModel::Lm, &["clinic", "y ~ x", "maxit=3"]).unwrap_err();
        assert!(e.to_string().contains("maxit"), "{e}");
        let e = parse(MetaModel::Coxph, &["lung", "Surv(t, s) ~ x", "level=1.5"]).unwrap_err();
        assert!(e.to_string().contains("between 0 and 1"), "{e}");
    }
}
