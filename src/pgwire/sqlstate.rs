//! Errors keep their meaning on the wire: every [`FedError`] becomes a
//! PostgreSQL `ErrorResponse` with the SQLSTATE a driver or a BI tool acts on.
//!
//! All of the mapping is in [`error_info`], one `match` over the error's
//! variants, so that a new variant of [`FedError`] gets its SQLSTATE here
//! and nowhere else. A refusal is `42501` (insufficient_privilege) with the
//! reason as the message and the bounded alternative in the HINT field; a
//! site that failed is `58000` naming the site — never class `08`, which
//! JDBC pools read as a broken connection and evict.

use datafusion::error::DataFusionError;
use pgwire::error::ErrorInfo;

use crate::error::FedError;

/// SQLSTATE codes fedsql sends.
pub mod code {
    /// A query refused by the exposure check or a site's policy.
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
    /// A table that does not exist.
    pub const UNDEFINED_TABLE: &str = "42P01";
    /// A column that does not exist.
    pub const UNDEFINED_COLUMN: &str = "42703";
    /// A function that does not exist (or not for these argument types).
    pub const UNDEFINED_FUNCTION: &str = "42883";
    /// SQL that cannot be parsed.
    pub const SYNTAX_ERROR: &str = "42601";
    /// A table or object that already exists.
    pub const DUPLICATE_OBJECT: &str = "42P07";
    /// Anything else wrong with a statement that parsed.
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    /// An argument out of range or of the wrong kind.
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    /// Division by zero.
    pub const DIVISION_BY_ZERO: &str = "22012";
    /// A client site that failed or timed out (named in the message).
    pub const SYSTEM_ERROR: &str = "58000";
    /// Out of memory or another resource limit.
    pub const INSUFFICIENT_RESOURCES: &str = "53000";
    /// The statement was cancelled, by a cancel request or `statement_timeout`.
    pub const QUERY_CANCELED: &str = "57014";
    /// A failure of fedsql itself.
    pub const INTERNAL_ERROR: &str = "XX000";
}

/// The PostgreSQL error for a fedsql error: SQLSTATE, message and hint.
pub fn error_info(error: &FedError) -> ErrorInfo {
    match error {
        FedError::Refused { reason, hint } => {
            with_hint(code::INSUFFICIENT_PRIVILEGE, reason.clone(), hint.clone())
        }
        FedError::Client { .. } => info(code::SYSTEM_ERROR, error.to_string()),
        FedError::Syntax(message) => info(code::SYNTAX_ERROR, message.clone()),
        FedError::Plan(message) => plan_error_info(message),
        FedError::DataFusion(e) => datafusion_error_info(e),
        FedError::Arrow(e) => arrow_error_info(e, error.to_string()),
        FedError::Io(_) => info(code::SYSTEM_ERROR, error.to_string()),
    }
}

/// An error with a SQLSTATE and a message (severity ERROR).
pub fn info(code: &str, message: impl Into<String>) -> ErrorInfo {
    ErrorInfo::new("ERROR".into(), code.into(), message.into())
}

fn with_hint(code: &str, message: String, hint: Option<String>) -> ErrorInfo {
    let mut info = info(code, message);
    info.hint = hint;
    info
}

/// `FedError::Plan` carries fedsql's own messages, and also a fedsql error
/// that travelled through DataFusion (a refusal raised inside a table
/// function comes back as its text).
fn plan_error_info(message: &str) -> ErrorInfo {
    if let Some(refusal) = message.strip_prefix("refused: ") {
        let (reason, hint) = match refusal.split_once("\nhint: ") {
            Some((reason, hint)) => (reason.to_string(), Some(hint.to_string())),
            None => (refusal.to_string(), None),
        };
        return with_hint(code::INSUFFICIENT_PRIVILEGE, reason, hint);
    }
    if message.starts_with("client '") {
        return info(code::SYSTEM_ERROR, message);
    }
    info(classify_message(message), message)
}

fn datafusion_error_info(e: &DataFusionError) -> ErrorInfo {
    match e {
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            datafusion_error_info(inner)
        }
        DataFusionError::Shared(inner) => datafusion_error_info(inner),
        DataFusionError::External(inner) => match inner.downcast_ref::<FedError>() {
            Some(fed) => error_info(fed),
            None => match inner.downcast_ref::<DataFusionError>() {
                Some(df) => datafusion_error_info(df),
                None => info(code::INTERNAL_ERROR, e.to_string()),
            },
        },
        DataFusionError::SQL(..) => info(code::SYNTAX_ERROR, e.to_string()),
        DataFusionError::SchemaError(schema, _) => {
            use datafusion::common::SchemaError;
            let code = match schema.as_ref() {
                SchemaError::FieldNotFound { .. } => code::UNDEFINED_COLUMN,
                SchemaError::AmbiguousReference { .. } => "42702",
                _ => "42P18",
            };
            info(code, e.to_string())
        }
        DataFusionError::NotImplemented(_) => info(code::FEATURE_NOT_SUPPORTED, e.to_string()),
        DataFusionError::Plan(message) => info(classify_message(message), e.to_string()),
        DataFusionError::Configuration(_) => info(code::INVALID_PARAMETER_VALUE, e.to_string()),
        DataFusionError::ResourcesExhausted(_) => info(code::INSUFFICIENT_RESOURCES, e.to_string()),
        DataFusionError::ArrowError(arrow, _) => arrow_error_info(arrow, e.to_string()),
        DataFusionError::Execution(message) => {
            let code = if message.contains("Divide by zero") {
                code::DIVISION_BY_ZERO
            } else {
                code::INVALID_PARAMETER_VALUE
            };
            info(code, e.to_string())
        }
        _ => info(code::INTERNAL_ERROR, e.to_string()),
    }
}

fn arrow_error_info(e: &datafusion::arrow::error::ArrowError, message: String) -> ErrorInfo {
    use datafusion::arrow::error::ArrowError;
    let code = match e {
        ArrowError::DivideByZero => code::DIVISION_BY_ZERO,
        ArrowError::CastError(_)
        | ArrowError::ParseError(_)
        | ArrowError::InvalidArgumentError(_) => "22P02",
        ArrowError::ComputeError(_) => code::INVALID_PARAMETER_VALUE,
        _ => code::INTERNAL_ERROR,
    };
    info(code, message)
}

/// The kind of a planning error, from DataFusion's and fedsql's wording.
fn classify_message(message: &str) -> &'static str {
    let lower = message.to_ascii_lowercase();
    if (lower.starts_with("table '") && lower.contains("' not found"))
        || lower.starts_with("no table named")
    {
        code::UNDEFINED_TABLE
    } else if lower.starts_with("invalid function")
        || (lower.contains("function") && lower.contains("not found"))
        || lower.contains("no function matches")
    {
        code::UNDEFINED_FUNCTION
    } else if lower.contains("already exists") {
        code::DUPLICATE_OBJECT
    } else if lower.contains("not supported") || lower.contains("unsupported") {
        code::FEATURE_NOT_SUPPORTED
    } else {
        code::INVALID_PARAMETER_VALUE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_is_insufficient_privilege_with_hint() {
        let e = FedError::refused("`median` keeps every value", Some("use approx_median(x)"));
        let info = error_info(&e);
        assert_eq!(info.code, "42501");
        assert_eq!(info.message, "`median` keeps every value");
        assert_eq!(info.hint.as_deref(), Some("use approx_median(x)"));
    }

    #[test]
    fn refusal_that_travelled_through_datafusion_keeps_its_code() {
        let e = FedError::Plan("refused: raw rows\nhint: aggregate".into());
        let info = error_info(&e);
        assert_eq!(info.code, "42501");
        assert_eq!(info.message, "raw rows");
        assert_eq!(info.hint.as_deref(), Some("aggregate"));
    }

    #[test]
    fn site_failure_is_system_error_naming_the_site() {
        let e = FedError::Client {
            client: "hospital_a".into(),
            location: "fedsql://10.0.0.1:50051".into(),
            message: "unreachable".into(),
        };
        let info = error_info(&e);
        assert_eq!(info.code, "58000");
        assert!(info.message.contains("hospital_a"));
    }

    #[test]
    fn datafusion_planning_errors() {
        let table = FedError::DataFusion(DataFusionError::Plan(
            "table 'datafusion.public.nosuch' not found".into(),
        ));
        assert_eq!(error_info(&table).code, "42P01");
        let function = FedError::DataFusion(DataFusionError::Plan(
            "Invalid function 'nosuch'.\nDid you mean 'cosh'?".into(),
        ));
        assert_eq!(error_info(&function).code, "42883");
        assert_eq!(error_info(&FedError::Syntax("bad".into())).code, "42601");
    }
}
