//! The one error type of the engine. Each variant is a kind a caller acts
//! on (a refusal, a failed site, a timeout, bad syntax, an unknown object,
//! a bad argument, a bug), and names the thing a user must fix — the
//! client, file, column or SQL operator — and says what to do.

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::parser::ParserError;

/// What a site under a disclosure policy answers for any failure while it
/// evaluates a query: the same words for every failure, so that neither
/// whether a query fails nor how tells one row's values.
pub const EVALUATION_REFUSAL: &str = "a site could not evaluate the query; under a disclosure policy a site says nothing more about a failure (its data owner can)";

/// Errors raised by fedsql.
#[derive(Debug, thiserror::Error)]
pub enum FedError {
    /// The query would let raw rows (or row-count-sized state) leave a client.
    #[error("refused: {reason}{}", hint_line(hint))]
    Refused {
        /// Which operator or function is the problem and why.
        reason: String,
        /// The bounded alternative, where one exists.
        hint: Option<String>,
    },
    /// A site refused to release a state under its data owner's policy.
    #[error("client '{client}' refused: {rule}{}", hint_line(hint))]
    Policy {
        client: String,
        /// The rule and its setting (never the data that broke it).
        rule: String,
        hint: Option<String>,
    },
    /// A site under a disclosure policy failed while evaluating a query:
    /// the analyst sees one fixed refusal, whatever failed; `detail` stays
    /// at the site (a worker logs it under a reference id).
    #[error("refused: {EVALUATION_REFUSAL}")]
    Withheld { detail: String },
    /// A client's data could not be read, or does not fit the federated
    /// schema, or the client failed while running an encoder.
    #[error("client '{client}' ({location}): {}", without_bug_text(message))]
    Client {
        client: String,
        location: String,
        message: String,
    },
    /// A client did not answer in time.
    #[error("client '{client}' ({location}) did not answer within {after}; {hint}")]
    Timeout {
        client: String,
        location: String,
        /// The time allowed, as the user gave it (e.g. `30s`).
        after: String,
        hint: String,
    },
    /// The statement is not valid SQL or fedsql (e.g. a malformed CREATE
    /// FEDERATED TABLE, a malformed formula).
    #[error("{0}")]
    Syntax(String),
    /// A table that does not exist.
    #[error("{0}")]
    UnknownTable(String),
    /// A column that does not exist.
    #[error("{0}")]
    UnknownColumn(String),
    /// Another object that does not exist: a function, an option, an
    /// optimizer, a chart.
    #[error("{0}")]
    UnknownObject(String),
    /// A table (or another object) of that name exists already.
    #[error("{0}")]
    AlreadyExists(String),
    /// An argument or setting whose value cannot be used.
    #[error("{0}")]
    InvalidArgument(String),
    /// A bug in fedsql: what should not happen did.
    #[error("{}", internal_text(.0))]
    Internal(String),
    /// An error from DataFusion that is none of the kinds above (its text
    /// without DataFusion's request to file a bug report, which is not
    /// the user's to do: see [`without_bug_text`]).
    #[error("{}", datafusion_text(.0))]
    DataFusion(DataFusionError),
    /// An error from Arrow (building or converting batches).
    #[error(transparent)]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    /// An I/O error outside a client (reading a script, writing output).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What a user can do about an error that should not happen.
const INTERNAL_HINT: &str = "this is a fault of fedsql, not of your query or data; rephrase the query (e.g. cast the column to the type you mean, CAST(x AS DOUBLE)), check the column types with \\d <table>, and report the statement with `fedsql --version`";

/// DataFusion's request that a user file a bug report with DataFusion,
/// which its internal errors end with.
const DATAFUSION_BUG_TEXT: &str = "This issue was likely caused by a bug in DataFusion's code. Please help us to resolve this by filing a bug report in our issue tracker: https://github.com/apache/datafusion/issues";

/// A message without DataFusion's request to file a bug report (and the
/// `.\n` that joins it).
pub(crate) fn without_bug_text(message: &str) -> String {
    if !message.contains(DATAFUSION_BUG_TEXT) {
        return message.to_string();
    }
    message
        .replace(&format!(".\n{DATAFUSION_BUG_TEXT}"), "")
        .replace(DATAFUSION_BUG_TEXT, "")
        .trim_end()
        .to_string()
}

/// An internal error as a user reads it: a call whose arguments no
/// signature takes (DataFusion reports that as internal for aggregates)
/// says what to do; anything else says it is a fault, and what to try.
fn internal_text(message: &str) -> String {
    if let Some(text) = no_matching_signature(message) {
        return text;
    }
    format!(
        "internal error: {}\nhint: {INTERNAL_HINT}",
        without_bug_text(message)
    )
}

/// "No function matches the given name and argument types 'avg(Utf8View)'"
/// as what to do about it.
fn no_matching_signature(message: &str) -> Option<String> {
    let (_, rest) =
        message.split_once("No function matches the given name and argument types '")?;
    let (call, rest) = rest.split_once('\'')?;
    let name = call.split('(').next().unwrap_or(call);
    let candidates: Vec<&str> = rest
        .split_once("Candidate functions:")
        .map(|(_, list)| {
            list.split_whitespace()
                .filter(|c| c.contains('('))
                .collect()
        })
        .unwrap_or_default();
    let takes = if candidates.is_empty() {
        String::new()
    } else {
        format!(" (it takes {})", candidates.join(", "))
    };
    let text = ["Utf8", "LargeUtf8", "Utf8View"]
        .iter()
        .any(|t| call.contains(&format!("({t}")) || call.contains(&format!(", {t}")));
    let csv = if text {
        "; a CSV column that reads as text because of a token for a missing value (NA, '.', ...) is read as numbers when the table names the token: CREATE OR REPLACE FEDERATED TABLE ... OPTIONS ('format.null_value' 'NA'), or 'format.null_value.<site>' for one site"
    } else {
        ""
    };
    Some(format!(
        "{name} cannot take arguments of types {call}{takes}\nhint: cast the argument to the type you mean, e.g. {name}(CAST(x AS DOUBLE)){csv}"
    ))
}

/// A DataFusion error as a user reads it: an internal error anywhere in
/// it says so once, with what to do instead of DataFusion's bug report.
fn datafusion_text(e: &DataFusionError) -> String {
    let text = e.to_string();
    // A function's own message about its arguments, first: DataFusion
    // wraps it in "Function 'f' user-defined coercion failed with: ...".
    if let Some((_, own)) = text.split_once("user-defined coercion failed with: ") {
        let mut own = own.trim();
        while let Some(rest) = ["Error during planning: ", "Execution error: "]
            .iter()
            .find_map(|p| own.strip_prefix(p))
        {
            own = rest;
        }
        // Then DataFusion's "No function matches ..." adds nothing.
        if let Some((first, _)) = own.split_once(" No function matches the given name") {
            own = first.trim_end();
        }
        return own.to_string();
    }
    if let Some(translated) = no_matching_signature(&text) {
        return translated;
    }
    if !text.contains(DATAFUSION_BUG_TEXT) {
        return text;
    }
    let text = without_bug_text(&text).replace("Internal error: ", "");
    format!("internal error: {text}\nhint: {INTERNAL_HINT}")
}

fn hint_line(hint: &Option<String>) -> String {
    hint.as_ref()
        .map(|h| format!("\nhint: {h}"))
        .unwrap_or_default()
}

impl From<DataFusionError> for FedError {
    /// A fedsql error that travelled through DataFusion (e.g. raised while a
    /// table function's plan ran) comes back as itself; DataFusion's own
    /// errors map to the nearest kind.
    fn from(e: DataFusionError) -> Self {
        match e {
            DataFusionError::External(inner) => match inner.downcast::<FedError>() {
                Ok(fed) => *fed,
                // A DataFusion error boxed as an external one (a stream's
                // error passed on) is read as itself.
                Err(other) => match other.downcast::<DataFusionError>() {
                    Ok(inner) => FedError::from(*inner),
                    Err(other) => FedError::DataFusion(DataFusionError::External(other)),
                },
            },
            DataFusionError::Context(context, inner) => match FedError::from(*inner) {
                FedError::DataFusion(inner) => {
                    FedError::DataFusion(DataFusionError::Context(context, Box::new(inner)))
                }
                kind => kind,
            },
            DataFusionError::Shared(shared) => match std::sync::Arc::try_unwrap(shared) {
                Ok(inner) => FedError::from(inner),
                Err(shared) => FedError::DataFusion(DataFusionError::Shared(shared)),
            },
            DataFusionError::SQL(e, _) => match *e {
                ParserError::ParserError(m) | ParserError::TokenizerError(m) => FedError::Syntax(m),
                other => FedError::Syntax(other.to_string()),
            },
            DataFusionError::SchemaError(e, backtrace) => match e.as_ref() {
                datafusion::common::SchemaError::FieldNotFound { .. } => {
                    FedError::UnknownColumn(e.to_string())
                }
                _ => FedError::DataFusion(DataFusionError::SchemaError(e, backtrace)),
            },
            DataFusionError::Internal(m) => FedError::Internal(m),
            other => FedError::DataFusion(other),
        }
    }
}

impl FedError {
    /// The error as a user should read it: a fedsql error that DataFusion
    /// carried (shown as "External error: ...") is unwrapped to itself.
    pub fn unwrapped(self) -> Self {
        match self {
            FedError::DataFusion(e) => FedError::from(e),
            other => other,
        }
    }

    /// A refusal with a hint naming the bounded alternative.
    pub fn refused(reason: impl Into<String>, hint: Option<&str>) -> Self {
        FedError::Refused {
            reason: reason.into(),
            hint: hint.map(str::to_string),
        }
    }

    /// Whether writing the output failed because its reader went away (a
    /// pipe closed early, as by `fedsql -c ... | head -1`): the program
    /// then ends quietly and successfully, as psql and duckdb do.
    pub fn is_broken_pipe(&self) -> bool {
        match self {
            FedError::Io(io) => io.kind() == std::io::ErrorKind::BrokenPipe,
            FedError::Arrow(arrow) => arrow_broken_pipe(arrow),
            FedError::DataFusion(DataFusionError::ArrowError(arrow, _)) => arrow_broken_pipe(arrow),
            FedError::DataFusion(DataFusionError::IoError(io)) => {
                io.kind() == std::io::ErrorKind::BrokenPipe
            }
            _ => false,
        }
    }
}

fn arrow_broken_pipe(error: &datafusion::arrow::error::ArrowError) -> bool {
    use datafusion::arrow::error::ArrowError;
    match error {
        ArrowError::IoError(_, io) => io.kind() == std::io::ErrorKind::BrokenPipe,
        // arrow's CSV writer keeps only the text of the I/O error.
        ArrowError::CsvError(message) => {
            message.contains("Broken pipe") || message.contains("os error 32")
        }
        ArrowError::ExternalError(inner) => inner
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe),
        _ => false,
    }
}

/// Result type of the engine.
pub type Result<T, E = FedError> = std::result::Result<T, E>;

/// The message of a caught panic (a `&str` or `String` payload), for a log
/// line or an internal error.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carried_refusal_shows_no_external_error_prefix() {
        let refusal = || FedError::refused("client 'a' refused raw rows", None);
        for carried in [
            FedError::DataFusion(DataFusionError::External(Box::new(refusal()))),
            FedError::from(DataFusionError::External(Box::new(
                DataFusionError::External(Box::new(refusal())),
            ))),
        ] {
            let text = carried.unwrapped().to_string();
            assert!(!text.contains("External error"), "{text}");
            assert!(text.contains("client 'a' refused raw rows"), "{text}");
        }
    }

    #[test]
    fn datafusion_bug_reports_and_coercion_wrappers_are_not_shown() {
        let internal = FedError::from(DataFusionError::Internal("x went wrong".into()));
        let text = internal.to_string();
        assert!(
            !text.contains("bug report") && text.contains("x went wrong"),
            "{text}"
        );
        let nested = FedError::DataFusion(DataFusionError::Context(
            "running".into(),
            Box::new(DataFusionError::Internal("y".into())),
        ));
        let text = nested.to_string();
        assert!(
            !text.contains("DataFusion's code") && text.starts_with("internal error:"),
            "{text}"
        );
        assert!(text.contains("hint:"), "{text}");
        let coercion = FedError::DataFusion(DataFusionError::Plan(
            "Execution error: Function 'dp_avg' user-defined coercion failed with: Error during planning: dp_avg takes 3 or 4 arguments: dp_avg(x, lower, upper [, epsilon])".into(),
        ));
        assert_eq!(
            coercion.to_string(),
            "dp_avg takes 3 or 4 arguments: dp_avg(x, lower, upper [, epsilon])"
        );
        let avg = FedError::from(DataFusionError::Internal(
            "Error during planning: Function 'avg' failed to match any signature, errors: x. No function matches the given name and argument types 'avg(Utf8View)'. You might need to add explicit type casts.\n\tCandidate functions:\n\tavg(Decimal)\n\tavg(Float64)".into(),
        ))
        .to_string();
        assert!(
            avg.starts_with("avg cannot take arguments of types avg(Utf8View) (it takes avg(Decimal), avg(Float64))")
                && avg.contains("format.null_value")
                && !avg.contains("internal"),
            "{avg}"
        );
    }
}
