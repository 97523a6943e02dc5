//! The one error type of the engine. Each variant names the thing a user must
//! fix — the client, file, column or SQL operator — and says what to do.

use datafusion::error::DataFusionError;

/// Errors raised by fedsql.
#[derive(Debug, thiserror::Error)]
pub enum FedError {
    /// The query would let raw rows (or row-count-sized state) leave a client.
    #[error("refused: {reason}{}", hint.as_ref().map(|h| format!("\nhint: {h}")).unwrap_or_default())]
    Refused {
        /// Which operator or function is the problem and why.
        reason: String,
        /// The bounded alternative, where one exists.
        hint: Option<String>,
    },
    /// A client's data could not be read, or does not fit the federated schema.
    #[error("client '{client}' ({location}): {message}")]
    Client {
        client: String,
        location: String,
        message: String,
    },
    /// The statement is not valid fedsql (e.g. a malformed CREATE FEDERATED TABLE).
    #[error("{0}")]
    Syntax(String),
    /// Anything else the user asked for that cannot be done (unknown table, ...).
    #[error("{0}")]
    Plan(String),
    /// An error from DataFusion itself.
    #[error(transparent)]
    DataFusion(DataFusionError),
    /// An error from Arrow (building or converting batches).
    #[error(transparent)]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    /// An I/O error outside a client (reading a script, writing output).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<DataFusionError> for FedError {
    /// A fedsql error that travelled through DataFusion (e.g. raised while a
    /// table function's plan ran) comes back as itself.
    fn from(e: DataFusionError) -> Self {
        let root = e.find_root();
        if let DataFusionError::External(inner) = root
            && let Some(fed) = inner.downcast_ref::<FedError>()
        {
            return FedError::Plan(fed.to_string());
        }
        FedError::DataFusion(e)
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
}

/// Result type of the engine.
pub type Result<T, E = FedError> = std::result::Result<T, E>;
