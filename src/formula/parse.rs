//! A formula read: its response, terms and variables (columns, factors,
//! transforms, `.`), parsed from R's syntax, and what a variable is
//! against a source's schema (a factor or a number; a missing column).

use std::fmt;

use datafusion::arrow::datatypes::{DataType, Schema};

use crate::coordinator::client_column::CLIENT_COLUMN;
use crate::error::{FedError, Result};

use super::arithmetic::{Arithmetic, FUNCTIONS};

/// The left-hand side of a formula.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// One column.
    Column(String),
    /// `cbind(successes, failures)`.
    Counts { successes: String, failures: String },
}

/// A variable in a term: a column, possibly forced to be a factor by `C()`,
/// or a numeric transform of columns (`I(age^2)`, `log(x)`).
#[derive(Debug, Clone, PartialEq)]
pub struct Variable {
    /// The column; for a transform, its text as written (its name).
    pub column: String,
    /// Written as `C(column)`.
    pub forced_factor: bool,
    /// The reference level `C(column, Treatment('level'))` chose.
    pub reference: Option<String>,
    /// For a transform: the SQL computing it and the columns it reads.
    pub transform: Option<Transform>,
    /// How R names the variable when it was written as one of R's calls
    /// (`factor(x)`, `as.factor(x)`, `relevel(x, "b")`), for `names=r`.
    pub written: Option<String>,
}

/// A numeric variable computed from columns: `I(...)`, `log(...)`, ...
#[derive(Debug, Clone, PartialEq)]
pub struct Transform {
    pub sql: String,
    pub columns: Vec<String>,
}

impl Variable {
    pub(super) fn column(column: String, forced_factor: bool) -> Self {
        Self {
            column,
            forced_factor,
            reference: None,
            transform: None,
            written: None,
        }
    }

    /// The variable as R names it in a coefficient (`names=r`).
    pub fn r_name(&self) -> String {
        match (&self.written, &self.reference, self.forced_factor) {
            (Some(written), _, _) => written.clone(),
            (None, Some(level), _) => format!("C({}, Treatment(\"{level}\"))", self.column),
            (None, None, true) => format!("C({})", self.column),
            (None, None, false) => self.column.clone(),
        }
    }

    /// The source columns the variable reads.
    pub fn source_columns(&self) -> Vec<String> {
        match &self.transform {
            Some(t) => t.columns.clone(),
            None => vec![self.column.clone()],
        }
    }
}

impl fmt::Display for Variable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.reference, self.forced_factor) {
            (Some(level), _) => write!(
                f,
                "C({}, Treatment('{}'))",
                self.column,
                level.replace('\'', "\\'")
            ),
            (None, true) => write!(f, "C({})", self.column),
            (None, false) => f.write_str(&self.column),
        }
    }
}

/// The term `.` stands for, until the source's columns are known.
pub(super) const DOT: &str = ".";

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
    /// `offset(...)`: a column or an expression of columns.
    pub offset: Option<Variable>,
    /// Terms written with `-`, applied again when `.` is expanded.
    pub removed: Vec<Term>,
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
            removed: Vec::new(),
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
                    formula.removed.extend(removed);
                }
                DOT if sign => formula.terms.push(Term {
                    variables: vec![Variable::column(DOT.into(), false)],
                }),
                _ if is_call(item, "offset") => {
                    let offset = parse_offset(&inner(item, "offset").map_err(err)?).map_err(err)?;
                    if formula.offset.replace(offset).is_some() {
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
                for c in v.source_columns() {
                    if c != DOT {
                        add(&c);
                    }
                }
            }
        }
        if let Some(offset) = &self.offset {
            offset.source_columns().iter().for_each(|c| add(c));
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

    /// The formula with `.` replaced by every column of `schema` not
    /// otherwise in it (R's rule), in the schema's order; never `_client`.
    pub fn expand_dot(&self, schema: &Schema) -> Formula {
        let Some(at) = self.terms.iter().position(is_dot) else {
            return self.clone();
        };
        let mut named: Vec<String> = match &self.response {
            Response::Column(c) => vec![c.clone()],
            Response::Counts {
                successes,
                failures,
            } => vec![successes.clone(), failures.clone()],
        };
        named.extend(self.offset.iter().flat_map(Variable::source_columns));
        for term in &self.terms {
            if let [v] = term.variables.as_slice()
                && v.transform.is_none()
            {
                named.push(v.column.clone());
            }
        }
        let dot_terms = schema
            .fields()
            .iter()
            .map(|f| f.name())
            .filter(|c| *c != CLIENT_COLUMN && !named.contains(c))
            .map(|c| Term {
                variables: vec![Variable::column(c.clone(), false)],
            });
        let mut terms: Vec<Term> = self.terms[..at].to_vec();
        terms.extend(dot_terms);
        terms.extend(self.terms[at + 1..].iter().filter(|t| !is_dot(t)).cloned());
        terms.retain(|t| !self.removed.iter().any(|r| r.same_variables(t)));
        let mut seen: Vec<Term> = Vec::new();
        for t in terms {
            if !seen.contains(&t) {
                seen.push(t);
            }
        }
        Formula {
            terms: seen,
            ..self.clone()
        }
    }
}

fn is_dot(term: &Term) -> bool {
    matches!(term.variables.as_slice(), [v] if v.column == DOT && v.transform.is_none())
}

/// The most factors one `*` chain may cross: 2^10 − 1 = 1023 terms.
const MAX_CROSSED: usize = 10;

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
    // Every non-empty subset of the starred parts, in R's order (by size):
    // 2^k − 1 terms, so k is bounded (found by fuzzing: a chain of 40
    // factors ran for hours).
    let k = factors.len();
    if k > MAX_CROSSED {
        return Err(format!(
            "`{}` crosses {k} factors with `*`, which expands to 2^{k} − 1 terms; at most {MAX_CROSSED} may be crossed (write the interactions you want with `:`)",
            item.trim()
        ));
    }
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

/// The argument of `offset(...)`: a column, or an expression of columns
/// (`offset(log(followup))`).
fn parse_offset(text: &str) -> Result<Variable, String> {
    if identifier(text).is_ok() {
        return Ok(Variable::column(identifier(text)?, false));
    }
    let mut columns = Vec::new();
    let sql = Arithmetic::new(text, &mut columns).parse()?;
    if columns.is_empty() {
        return Err(format!("`offset({text})` reads no column"));
    }
    Ok(Variable {
        transform: Some(Transform { sql, columns }),
        ..Variable::column(text.split_whitespace().collect::<Vec<_>>().join(" "), false)
    })
}

/// R's factor calls: `factor(x)` and `as.factor(x)` (as `C(x)`), and
/// `relevel(x, "ref")` (as `C(x, Treatment('ref'))`); `None` for other text.
fn r_factor_call(text: &str) -> Option<Result<Variable, String>> {
    let call = ["factor", "as.factor", "relevel"]
        .into_iter()
        .find(|f| is_call(text, f))?;
    Some((|| {
        let args = split_top(&inner(text, call)?, ',');
        match (call, args.as_slice()) {
            ("relevel", [column, reference]) => {
                let column = identifier(column)?;
                let reference = reference.trim();
                let reference = reference
                    .strip_prefix("ref")
                    .and_then(|r| r.trim_start().strip_prefix('='))
                    .unwrap_or(reference)
                    .trim();
                let level =
                    treatment_reference(&format!("Treatment({reference})")).map_err(|_| {
                        format!(
                            "cannot read the level in `{text}`: write relevel(column, \"level\")"
                        )
                    })?;
                Ok(Variable {
                    reference: Some(level.clone()),
                    written: Some(format!("relevel({column}, \"{level}\")")),
                    ..Variable::column(column, true)
                })
            }
            ("relevel", _) => Err(format!(
                "cannot read `{text}`: write relevel(column, \"level\")"
            )),
            (_, [column]) => {
                let column = identifier(column)?;
                Ok(Variable {
                    written: Some(format!("{call}({column})")),
                    ..Variable::column(column, true)
                })
            }
            _ => Err(format!("cannot read `{text}`: write {call}(column)")),
        }
    })())
}

fn parse_variable(text: &str) -> Result<Variable, String> {
    let text = text.trim();
    if text == DOT {
        return Err("`.` stands alone, as a term of its own (`y ~ . + z`, `y ~ . - x`)".into());
    }
    if let Some(variable) = r_factor_call(text) {
        return variable;
    }
    if text.starts_with("C(") {
        let args = split_top(&inner(text, "C")?, ',');
        return match args.as_slice() {
            [column] => Ok(Variable::column(identifier(column)?, true)),
            [column, contrast] => Ok(Variable {
                reference: Some(treatment_reference(contrast)?),
                ..Variable::column(identifier(column)?, true)
            }),
            _ => Err(format!(
                "cannot read `{text}`: write C(column) or C(column, Treatment('level'))"
            )),
        };
    }
    if FUNCTIONS.iter().chain(&["I"]).any(|f| is_call(text, f)) {
        let mut columns = Vec::new();
        let sql = Arithmetic::new(text, &mut columns).parse()?;
        if columns.is_empty() {
            return Err(format!("`{text}` reads no column"));
        }
        return Ok(Variable {
            transform: Some(Transform { sql, columns }),
            ..Variable::column(text.split_whitespace().collect::<Vec<_>>().join(" "), false)
        });
    }
    Ok(Variable::column(identifier(text)?, false))
}

fn is_call(text: &str, name: &str) -> bool {
    text.strip_prefix(name)
        .is_some_and(|rest| rest.trim_start().starts_with('(') && text.ends_with(')'))
}

/// The level of `Treatment('level')` (or `"level"`, `reference='level'`, a number).
fn treatment_reference(text: &str) -> Result<String, String> {
    let arg = inner(text.trim(), "Treatment").map_err(|_| {
        format!(
            "cannot read `{}`: the contrast is Treatment('level') (in an SQL string literal: Treatment(''level''))",
            text.trim()
        )
    })?;
    let arg = arg
        .strip_prefix("reference")
        .and_then(|a| a.trim_start().strip_prefix('='))
        .unwrap_or(&arg)
        .trim();
    let unquoted = arg
        .strip_prefix('\'')
        .and_then(|a| a.strip_suffix('\''))
        .or_else(|| arg.strip_prefix('"').and_then(|a| a.strip_suffix('"')));
    match unquoted {
        Some(level) => Ok(level.to_string()),
        None if !arg.is_empty() && arg.parse::<f64>().is_ok() => Ok(arg.to_string()),
        None => Err(format!(
            "cannot read the level in `{}`: quote it, Treatment('{arg}')",
            text.trim()
        )),
    }
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
            "`{text}` is not a column name (supported: columns, C(col), C(col, Treatment('level')), factor(col), as.factor(col), relevel(col, \"level\"), I(expr), log(x), exp(x), sqrt(x), ., a:b, a*b, - 1, offset(expr); for a power write I(x^2))"
        ))
    }
}

/// Splits the right-hand side at top-level `+` / `-`, with the sign of each part.
fn split_terms(rhs: &str) -> Result<Vec<(bool, String)>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut sign, mut current) = (0i32, None::<char>, true, String::new());
    for c in rhs.chars() {
        match (c, quote) {
            ('"' | '\'', None) => quote = Some(c),
            (c, Some(q)) if c == q => quote = None,
            (_, Some(_)) => {}
            ('(', None) => depth += 1,
            (')', None) => depth -= 1,
            ('+' | '-', None) if depth == 0 => {
                if !current.trim().is_empty() {
                    parts.push((sign, std::mem::take(&mut current)));
                } else if !(parts.is_empty() || c == '-' && sign) {
                    // `x + -1` is R's `x - 1`; `x + + z` and `x - - z` are not terms.
                    return Err(format!("a term is missing before `{c}`"));
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
    if quote.is_some() {
        return Err("an unclosed quote".into());
    }
    if !current.trim().is_empty() {
        parts.push((sign, current));
    } else if !parts.is_empty() {
        return Err(format!(
            "the formula ends with `{}`: a term is missing",
            if sign { '+' } else { '-' }
        ));
    }
    if parts.is_empty() {
        return Err("no terms on the right of `~`".into());
    }
    Ok(parts)
}

fn split_top(text: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut current) = (0i32, None::<char>, String::new());
    for c in text.chars() {
        match (c, quote) {
            ('"' | '\'', None) => quote = Some(c),
            (c, Some(q)) if c == q => quote = None,
            (_, Some(_)) => {}
            ('(', None) => depth += 1,
            (')', None) => depth -= 1,
            (c, None) if c == sep && depth == 0 => {
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
pub(crate) fn is_factor(v: &Variable, schema: &Schema) -> Result<bool> {
    if v.transform.is_some() {
        return Ok(false);
    }
    if v.column == DOT {
        return Err(FedError::InvalidArgument(
            "`.` (every other column) is not supported by this function: name the columns".into(),
        ));
    }
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
pub(crate) fn missing_column(column: &str, schema: &Schema) -> FedError {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    FedError::InvalidArgument(format!(
        "the formula names column `{column}`, which the source does not have (its columns: {})",
        names.join(", ")
    ))
}
