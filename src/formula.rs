//! Model formulas in R's syntax, and the design matrix they describe.
//!
//! ```text
//! response ~ a + b + C(g) + a:C(g) + c*d - 1
//! cbind(successes, failures) ~ x + offset(log_exposure)
//! ```
//!
//! - numeric columns enter as they are; text columns and `C(x)` are factors,
//!   treatment-coded with the first level (sorted) as reference;
//! - `a:b` is an interaction, `a*b` means `a + b + a:b`;
//! - `- 1` or `+ 0` drops the intercept (`+ 1` keeps it);
//! - `cbind(s, f)` is a binomial response of successes and failures,
//!   `offset(col)` adds a known term to the linear predictor (GLMs only).
//!
//! Design columns are named as patsy (and statsmodels) names them:
//! `(Intercept)`, `x`, `C(g)[T.b]`, `g[T.b]`, `x:C(g)[T.b]`. Each design
//! column becomes an SQL expression that runs at the clients; a NULL in any
//! used column makes the row drop out of the fit.

use std::fmt;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::ScalarValue;

use crate::error::{FedError, Result};

/// The left-hand side of a formula.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// One column.
    Column(String),
    /// `cbind(successes, failures)`.
    Counts { successes: String, failures: String },
}

/// A variable in a term: a column, possibly forced to be a factor by `C()`.
#[derive(Debug, Clone, PartialEq)]
pub struct Variable {
    pub column: String,
    /// Written as `C(column)`.
    pub forced_factor: bool,
}

impl fmt::Display for Variable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.forced_factor {
            write!(f, "C({})", self.column)
        } else {
            f.write_str(&self.column)
        }
    }
}

/// A term: one variable (a main effect) or an interaction of several.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    pub variables: Vec<Variable>,
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.variables.iter().map(|v| v.to_string()).collect();
        f.write_str(&parts.join(":"))
    }
}

/// A parsed formula.
#[derive(Debug, Clone, PartialEq)]
pub struct Formula {
    pub response: Response,
    pub terms: Vec<Term>,
    pub intercept: bool,
    pub offset: Option<String>,
}

impl Formula {
    /// Parses `response ~ terms`.
    pub fn parse(text: &str) -> Result<Self> {
        let err =
            |message: String| FedError::InvalidArgument(format!("formula '{text}': {message}"));
        let (lhs, rhs) = text
            .split_once('~')
            .ok_or_else(|| err("expected `response ~ terms`, e.g. 'y ~ x1 + x2'".into()))?;
        let response = parse_response(lhs.trim()).map_err(err)?;
        let mut formula = Formula {
            response,
            terms: Vec::new(),
            intercept: true,
            offset: None,
        };
        for (sign, item) in split_terms(rhs).map_err(err)? {
            let item = item.trim();
            match item {
                "1" => formula.intercept = sign,
                "0" if sign => formula.intercept = false,
                "" => return Err(err("an empty term".into())),
                _ if !sign => {
                    let removed = parse_product(item).map_err(err)?;
                    formula
                        .terms
                        .retain(|t| !removed.iter().any(|r| r.same_variables(t)));
                }
                _ if item.starts_with("offset(") => {
                    let column = inner(item, "offset").map_err(err)?;
                    if formula.offset.replace(column).is_some() {
                        return Err(err("give one offset(...)".into()));
                    }
                }
                _ => {
                    for term in parse_product(item).map_err(err)? {
                        if !formula.terms.contains(&term) {
                            formula.terms.push(term);
                        }
                    }
                }
            }
        }
        if formula.terms.is_empty() && !formula.intercept {
            return Err(err("the model has no terms and no intercept".into()));
        }
        Ok(formula)
    }

    /// Every column the formula uses (response, terms, offset), once each.
    pub fn columns(&self) -> Vec<String> {
        let mut columns = Vec::new();
        let mut add = |c: &str| {
            if !columns.iter().any(|x: &String| x == c) {
                columns.push(c.to_string());
            }
        };
        match &self.response {
            Response::Column(c) => add(c),
            Response::Counts {
                successes,
                failures,
            } => {
                add(successes);
                add(failures);
            }
        }
        for term in &self.terms {
            for v in &term.variables {
                add(&v.column);
            }
        }
        if let Some(offset) = &self.offset {
            add(offset);
        }
        columns
    }

    /// The variables that are factors, given the source's schema.
    pub fn factors(&self, schema: &Schema) -> Result<Vec<String>> {
        let mut factors: Vec<String> = Vec::new();
        for term in &self.terms {
            for v in &term.variables {
                if is_factor(v, schema)? && !factors.contains(&v.column) {
                    factors.push(v.column.clone());
                }
            }
        }
        Ok(factors)
    }
}

/// `A*B*C` → every sub-interaction; `A:B` → one term.
fn parse_product(item: &str) -> Result<Vec<Term>, String> {
    let factors: Vec<Vec<Variable>> = split_top(item, '*')
        .iter()
        .map(|part| {
            split_top(part, ':')
                .iter()
                .map(|v| parse_variable(v))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<_, _>>()?;
    let mut terms = Vec::new();
    // Every non-empty subset of the starred parts, in R's order (by size).
    let k = factors.len();
    for size in 1..=k {
        for mask in 1u32..(1 << k) {
            if mask.count_ones() as usize != size {
                continue;
            }
            let mut variables = Vec::new();
            for (i, f) in factors.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    variables.extend(f.iter().cloned());
                }
            }
            terms.push(Term { variables });
        }
    }
    Ok(terms)
}

fn parse_variable(text: &str) -> Result<Variable, String> {
    let text = text.trim();
    if text.starts_with("C(") {
        return Ok(Variable {
            column: identifier(&inner(text, "C")?)?,
            forced_factor: true,
        });
    }
    Ok(Variable {
        column: identifier(text)?,
        forced_factor: false,
    })
}

fn parse_response(text: &str) -> Result<Response, String> {
    if text.starts_with("cbind(") {
        let args = inner(text, "cbind")?;
        let parts = split_top(&args, ',');
        let [s, f] = parts.as_slice() else {
            return Err("cbind(successes, failures) takes two columns".into());
        };
        return Ok(Response::Counts {
            successes: identifier(s)?,
            failures: identifier(f)?,
        });
    }
    Ok(Response::Column(identifier(text)?))
}

/// The argument text of `name(...)`.
fn inner(text: &str, name: &str) -> Result<String, String> {
    text.strip_prefix(name)
        .and_then(|t| t.trim_start().strip_prefix('('))
        .and_then(|t| t.trim_end().strip_suffix(')'))
        .map(|t| t.trim().to_string())
        .ok_or_else(|| format!("cannot read `{text}`: expected {name}(...)"))
}

/// A column name: a plain identifier or a double-quoted one.
fn identifier(text: &str) -> Result<String, String> {
    let text = text.trim();
    if let Some(quoted) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        return Ok(quoted.to_string());
    }
    let ok = text
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && text.chars().all(|c| c.is_alphanumeric() || c == '_');
    if ok {
        Ok(text.to_string())
    } else if text.is_empty() {
        Err("a term is missing".into())
    } else {
        Err(format!(
            "`{text}` is not a column name (supported: columns, C(col), a:b, a*b, - 1, offset(col); use a query string to compute other variables)"
        ))
    }
}

/// Splits the right-hand side at top-level `+` / `-`, with the sign of each part.
fn split_terms(rhs: &str) -> Result<Vec<(bool, String)>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut quoted, mut sign, mut current) = (0i32, false, true, String::new());
    for c in rhs.chars() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            '+' | '-' if !quoted && depth == 0 => {
                if !current.trim().is_empty() {
                    parts.push((sign, std::mem::take(&mut current)));
                } else if !parts.is_empty() || c == '+' {
                    current.clear();
                }
                sign = c == '+';
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    if !current.trim().is_empty() {
        parts.push((sign, current));
    }
    if parts.is_empty() {
        return Err("no terms on the right of `~`".into());
    }
    Ok(parts)
}

fn split_top(text: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let (mut depth, mut current) = (0i32, String::new());
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            c if c == sep && depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    parts.push(current);
    parts
}

impl Term {
    /// Whether two terms interact the same columns (`a:b` is `b:a`).
    fn same_variables(&self, other: &Term) -> bool {
        let mut mine: Vec<String> = self.variables.iter().map(|v| v.column.clone()).collect();
        let mut theirs: Vec<String> = other.variables.iter().map(|v| v.column.clone()).collect();
        mine.sort();
        theirs.sort();
        mine == theirs
    }
}

/// Whether a variable is a factor: `C(x)`, or a text or boolean column.
pub fn is_factor(v: &Variable, schema: &Schema) -> Result<bool> {
    let field = schema
        .field_with_name(&v.column)
        .map_err(|_| missing_column(&v.column, schema))?;
    Ok(v.forced_factor
        || matches!(
            field.data_type(),
            DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Boolean
                | DataType::Dictionary(..)
        ))
}

/// The error for a formula naming a column the source lacks.
pub fn missing_column(column: &str, schema: &Schema) -> FedError {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    FedError::InvalidArgument(format!(
        "the formula names column `{column}`, which the source does not have (its columns: {})",
        names.join(", ")
    ))
}

/// One column of the design matrix: its name and the SQL computing it.
#[derive(Debug, Clone, PartialEq)]
pub struct DesignColumn {
    pub name: String,
    pub sql: String,
}

/// The levels of each factor, sorted, NULL excluded.
pub type Levels = Vec<(String, Vec<ScalarValue>)>;

/// The design columns of the formula's terms (without the intercept).
pub fn design_columns(
    formula: &Formula,
    schema: &Schema,
    levels: &Levels,
) -> Result<Vec<DesignColumn>> {
    let mut columns = Vec::new();
    let mut full_coding_used = false;
    for term in &formula.terms {
        // Each variable's coding: (name part, sql) alternatives.
        let mut codings: Vec<Vec<(String, String)>> = Vec::new();
        for v in &term.variables {
            let field = schema
                .field_with_name(&v.column)
                .map_err(|_| missing_column(&v.column, schema))?;
            if is_factor(v, schema)? {
                let values = &levels
                    .iter()
                    .find(|(c, _)| c == &v.column)
                    .ok_or_else(|| FedError::Internal(format!("no levels for `{}`", v.column)))?
                    .1;
                // Without an intercept the first factor main effect gets every
                // level (R's and patsy's full-rank coding); else drop the reference.
                let full = !formula.intercept && term.variables.len() == 1 && !full_coding_used;
                full_coding_used |= full;
                let coded: Vec<(String, String)> = values
                    .iter()
                    .skip(usize::from(!full))
                    .map(|level| {
                        let label = level_label(level);
                        let name = if full {
                            format!("{v}[{label}]")
                        } else {
                            format!("{v}[T.{label}]")
                        };
                        (
                            name,
                            format!(
                                "CAST(({} = {}) AS DOUBLE)",
                                quote_ident(&v.column),
                                sql_literal(level)
                            ),
                        )
                    })
                    .collect();
                codings.push(coded);
            } else if field.data_type().is_numeric() {
                codings.push(vec![(
                    v.column.clone(),
                    format!("CAST({} AS DOUBLE)", quote_ident(&v.column)),
                )]);
            } else {
                return Err(FedError::InvalidArgument(format!(
                    "column `{}` is {}: a model term must be numeric, or a factor written C({})",
                    v.column,
                    field.data_type(),
                    v.column
                )));
            }
        }
        // The product of the codings of the term's variables.
        let mut product: Vec<(String, String)> = vec![(String::new(), String::new())];
        for coding in &codings {
            let mut next = Vec::new();
            for (name, sql) in &product {
                for (part_name, part_sql) in coding {
                    let name = if name.is_empty() {
                        part_name.clone()
                    } else {
                        format!("{name}:{part_name}")
                    };
                    let sql = if sql.is_empty() {
                        part_sql.clone()
                    } else {
                        format!("{sql} * {part_sql}")
                    };
                    next.push((name, sql));
                }
            }
            product = next;
        }
        columns.extend(
            product
                .into_iter()
                .map(|(name, sql)| DesignColumn { name, sql }),
        );
    }
    Ok(columns)
}

/// How a level shows in a column name, as patsy shows it.
fn level_label(level: &ScalarValue) -> String {
    match level {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => s.clone(),
        ScalarValue::Boolean(Some(b)) => if *b { "True" } else { "False" }.to_string(),
        ScalarValue::Float64(Some(f)) => format!("{f:?}"),
        ScalarValue::Float32(Some(f)) => format!("{f:?}"),
        other => other.to_string(),
    }
}

/// A level as an SQL literal.
fn sql_literal(level: &ScalarValue) -> String {
    match level {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => {
            format!("'{}'", s.replace('\'', "''"))
        }
        ScalarValue::Boolean(Some(b)) => b.to_string(),
        ScalarValue::Float64(Some(f)) => format!("CAST('{f:?}' AS DOUBLE)"),
        ScalarValue::Float32(Some(f)) => format!("CAST('{f:?}' AS REAL)"),
        other => other.to_string(),
    }
}

/// A column name as a quoted SQL identifier.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;

    fn v(c: &str) -> Variable {
        Variable {
            column: c.into(),
            forced_factor: false,
        }
    }

    #[test]
    fn parses_terms_interactions_and_intercept() {
        let f = Formula::parse("y ~ a + C(g) + a:C(g) - 1").unwrap();
        assert_eq!(f.response, Response::Column("y".into()));
        assert!(!f.intercept);
        let terms: Vec<String> = f.terms.iter().map(|t| t.to_string()).collect();
        assert_eq!(terms, ["a", "C(g)", "a:C(g)"]);
        let f = Formula::parse("y ~ a*b + 0").unwrap();
        let terms: Vec<String> = f.terms.iter().map(|t| t.to_string()).collect();
        assert_eq!(terms, ["a", "b", "a:b"]);
        assert!(!f.intercept);
        let f = Formula::parse("y ~ a*b - b:a").unwrap();
        assert_eq!(
            f.terms,
            vec![
                Term {
                    variables: vec![v("a")]
                },
                Term {
                    variables: vec![v("b")]
                }
            ]
        );
    }

    #[test]
    fn parses_counts_and_offset() {
        let f = Formula::parse("cbind(s, f) ~ x + offset(log_n)").unwrap();
        assert_eq!(
            f.response,
            Response::Counts {
                successes: "s".into(),
                failures: "f".into()
            }
        );
        assert_eq!(f.offset.as_deref(), Some("log_n"));
        assert_eq!(f.columns(), ["s", "f", "x", "log_n"]);
    }

    #[test]
    fn bad_formulas_say_what_is_wrong() {
        for (text, words) in [
            ("y x", "expected `response ~ terms`"),
            ("y ~ ", "no terms"),
            ("y ~ log(x)", "not a column name"),
            ("y ~ (a + b", "unbalanced"),
            ("y ~ 0", "no terms and no intercept"),
        ] {
            let e = Formula::parse(text).unwrap_err().to_string();
            assert!(e.contains(words), "{text}: {e}");
        }
    }

    #[test]
    fn design_columns_are_named_as_patsy_names_them() {
        let schema = Schema::new(vec![
            Field::new("y", DataType::Float64, true),
            Field::new("x", DataType::Int64, true),
            Field::new("g", DataType::Utf8, true),
        ]);
        let levels: Levels = vec![(
            "g".into(),
            vec![
                ScalarValue::Utf8(Some("a".into())),
                ScalarValue::Utf8(Some("b'c".into())),
            ],
        )];
        let f = Formula::parse("y ~ x + C(g) + x:g").unwrap();
        let cols = design_columns(&f, &schema, &levels).unwrap();
        let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["x", "C(g)[T.b'c]", "x:g[T.b'c]"]);
        assert_eq!(cols[1].sql, "CAST((\"g\" = 'b''c') AS DOUBLE)");
        let f = Formula::parse("y ~ C(g) - 1").unwrap();
        let names: Vec<String> = design_columns(&f, &schema, &levels)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["C(g)[a]", "C(g)[b'c]"]);
        let err = design_columns(&Formula::parse("y ~ nope").unwrap(), &schema, &levels)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`nope`") && err.contains("y, x, g"), "{err}");
    }
}
