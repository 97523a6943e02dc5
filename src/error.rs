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
    #[error("client '{client}' ({location}): {message}")]
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
    #[error("internal error: {0}")]
    Internal(String),
    /// An error from DataFusion that is none of the kinds above.
    #[error(transparent)]
    DataFusion(DataFusionError),
    /// An error from Arrow (building or converting batches).
    #[error(transparent)]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    /// An I/O error outside a client (reading a script, writing output).
    #[error(transparent)]
    Io(#[from] std::io::Error),
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
                Err(other) => FedError::DataFusion(DataFusionError::External(other)),
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
