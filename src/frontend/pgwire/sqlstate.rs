//! Errors keep their meaning on the wire: every [`FedError`] becomes a
//! PostgreSQL `ErrorResponse` with the SQLSTATE a driver or a BI tool acts on.
//!
//! All of the mapping is in [`error_info`], one `match` over the error's
//! variants, so that a new variant of [`FedError`] gets its SQLSTATE here
//! and nowhere else. A refusal (by the exposure check, or by a site's
//! policy) is `42501` (insufficient_privilege) with the reason as the
//! message and the bounded alternative in the HINT field; a site that
//! failed or timed out is `58000` naming the site — never class `08`, which
//! JDBC pools read as a broken connection and evict.

use datafusion::error::DataFusionError;
use pgwire::error::ErrorInfo;

use crate::error::FedError;

/// SQLSTATE codes fedsql sends.
pub(crate) mod code {
    /// A query refused by the exposure check or a site's policy.
    pub(crate) const INSUFFICIENT_PRIVILEGE: &str = "42501";
    /// A table that does not exist.
    pub(crate) const UNDEFINED_TABLE: &str = "42P01";
    /// A column that does not exist.
    pub(crate) const UNDEFINED_COLUMN: &str = "42703";
    /// A column name that more than one table has.
    pub(crate) const AMBIGUOUS_COLUMN: &str = "42702";
    /// A function that does not exist (or not for these argument types).
    pub(crate) const UNDEFINED_FUNCTION: &str = "42883";
    /// SQL that cannot be parsed.
    pub(crate) const SYNTAX_ERROR: &str = "42601";
    /// Another object that does not exist (an option, an optimizer).
    pub(crate) const UNDEFINED_OBJECT: &str = "42704";
    /// A table or object that already exists.
    pub(crate) const DUPLICATE_OBJECT: &str = "42P07";
    /// Anything else wrong with a statement that parsed.
    pub(crate) const FEATURE_NOT_SUPPORTED: &str = "0A000";
    /// An argument out of range or of the wrong kind.
    pub(crate) const INVALID_PARAMETER_VALUE: &str = "22023";
    /// Division by zero.
    pub(crate) const DIVISION_BY_ZERO: &str = "22012";
    /// A client site that failed or timed out (named in the message).
    pub(crate) const SYSTEM_ERROR: &str = "58000";
    /// Out of memory or another resource limit.
    pub(crate) const INSUFFICIENT_RESOURCES: &str = "53000";
    /// The statement was cancelled, by a cancel request or `statement_timeout`.
    pub(crate) const QUERY_CANCELED: &str = "57014";
    /// A failure of fedsql itself.
    pub(crate) const INTERNAL_ERROR: &str = "XX000";
}

/// The PostgreSQL error for a fedsql error: SQLSTATE, message and hint.
///
/// Each kind of [`FedError`] has its SQLSTATE, whatever its message says
/// (a table function's bad argument keeps its kind on its way through
/// DataFusion, see [`crate::table_function::arguments`]). Only errors
/// DataFusion raised itself are classified from DataFusion's kinds, and a
/// planning error of DataFusion's, which has no finer kind, from its wording.
pub(crate) fn error_info(error: &FedError) -> ErrorInfo {
    match error {
        FedError::Refused { reason, hint } => {
            with_hint(code::INSUFFICIENT_PRIVILEGE, reason.clone(), hint.clone())
        }
        FedError::Policy { client, rule, hint } => with_hint(
            code::INSUFFICIENT_PRIVILEGE,
            format!("client '{client}' refused: {rule}"),
            hint.clone(),
        ),
        FedError::Withheld { .. } => info(
            code::INSUFFICIENT_PRIVILEGE,
            crate::error::EVALUATION_REFUSAL.to_string(),
        ),
        FedError::Client { .. } => info(code::SYSTEM_ERROR, error.to_string()),
        FedError::Timeout {
            client,
            location,
            after,
            hint,
        } => with_hint(
            code::SYSTEM_ERROR,
            format!("client '{client}' ({location}) did not answer within {after}"),
            Some(hint.clone()),
        ),
        FedError::Syntax(message) => info(code::SYNTAX_ERROR, message.clone()),
        FedError::UnknownTable(message) => info(code::UNDEFINED_TABLE, message.clone()),
        FedError::UnknownColumn(message) => info(code::UNDEFINED_COLUMN, message.clone()),
        FedError::UnknownObject(message) => info(code::UNDEFINED_OBJECT, message.clone()),
        FedError::AlreadyExists(message) => info(code::DUPLICATE_OBJECT, message.clone()),
        FedError::InvalidArgument(message) => info(code::INVALID_PARAMETER_VALUE, message.clone()),
        FedError::Internal(_) => info(code::INTERNAL_ERROR, error.to_string()),
        FedError::DataFusion(e) => datafusion_error_info(e),
        FedError::Arrow(e) => arrow_error_info(e, error.to_string()),
        FedError::Io(_) => info(code::SYSTEM_ERROR, error.to_string()),
    }
}

/// An error with a SQLSTATE and a message (severity ERROR).
pub(crate) fn info(code: &str, message: impl Into<String>) -> ErrorInfo {
    ErrorInfo::new("ERROR".into(), code.into(), message.into())
}

fn with_hint(code: &str, message: String, hint: Option<String>) -> ErrorInfo {
    let mut info = info(code, message);
    info.hint = hint;
    info
}

fn is_unknown_table(lower: &str) -> bool {
    lower.contains("no table named") || (lower.contains("table '") && lower.contains("' not found"))
}

fn is_unknown_function(lower: &str) -> bool {
    lower.contains("invalid function")
        || (lower.contains("function") && lower.contains("not found"))
        || lower.contains("no function matches")
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
                SchemaError::AmbiguousReference { .. } => code::AMBIGUOUS_COLUMN,
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

/// The kind of a planning error DataFusion raised itself, from its wording.
fn classify_message(message: &str) -> &'static str {
    let lower = message.to_ascii_lowercase();
    if is_unknown_table(&lower) {
        code::UNDEFINED_TABLE
    } else if is_unknown_function(&lower) {
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
        let carried = DataFusionError::Context(
            "while planning".into(),
            Box::new(DataFusionError::External(Box::new(FedError::refused(
                "raw rows",
                Some("aggregate"),
            )))),
        );
        for e in [
            FedError::from(carried),
            FedError::DataFusion(DataFusionError::External(Box::new(FedError::refused(
                "raw rows",
                Some("aggregate"),
            )))),
        ] {
            let info = error_info(&e);
            assert_eq!(info.code, "42501", "{e}");
            assert_eq!(info.message, "raw rows");
            assert_eq!(info.hint.as_deref(), Some("aggregate"));
        }
    }

    #[test]
    fn policy_refusal_is_insufficient_privilege_naming_the_site() {
        let e = FedError::Policy {
            client: "hospital_a".into(),
            rule: "groups of fewer than 10 rows (min_group_rows = 10)".into(),
            hint: Some("coarsen the GROUP BY".into()),
        };
        let info = error_info(&e);
        assert_eq!(info.code, "42501");
        assert!(info.message.contains("hospital_a"), "{}", info.message);
        assert!(info.message.contains("min_group_rows"), "{}", info.message);
        assert_eq!(info.hint.as_deref(), Some("coarsen the GROUP BY"));
    }

    #[test]
    fn site_failure_and_timeout_are_system_error_naming_the_site() {
        let e = FedError::Client {
            client: "hospital_a".into(),
            location: "fedsql://10.0.0.1:50051".into(),
            message: "unreachable".into(),
        };
        let info = error_info(&e);
        assert_eq!(info.code, "58000");
        assert!(info.message.contains("hospital_a"));
        let e = FedError::Timeout {
            client: "hospital_b".into(),
            location: "grpc://10.0.0.2:50051".into(),
            after: "30s".into(),
            hint: "raise the client timeout".into(),
        };
        let info = error_info(&e);
        assert_eq!(info.code, "58000");
        assert!(info.message.contains("hospital_b"), "{}", info.message);
        assert!(info.message.contains("30s"), "{}", info.message);
        assert_eq!(info.hint.as_deref(), Some("raise the client timeout"));
    }

    #[test]
    fn each_kind_has_its_code() {
        let code = |e: FedError| error_info(&e).code;
        assert_eq!(code(FedError::Syntax("bad".into())), "42601");
        assert_eq!(
            code(FedError::UnknownTable("no table named `x`".into())),
            "42P01"
        );
        assert_eq!(
            code(FedError::UnknownColumn("no column `x`".into())),
            "42703"
        );
        assert_eq!(
            code(FedError::UnknownObject(
                "glm: unknown option `nosuch`: glm takes maxit, tol".into()
            )),
            "42704"
        );
        assert_eq!(
            code(FedError::AlreadyExists("table `t` already exists".into())),
            "42P07"
        );
        assert_eq!(
            code(FedError::InvalidArgument("maxit must be positive".into())),
            "22023"
        );
        assert_eq!(code(FedError::Internal("oops".into())), "XX000");
    }

    #[test]
    fn the_code_follows_the_kind_not_the_words() {
        let code = |e: FedError| error_info(&e).code;
        // Words that name another kind change nothing.
        assert_eq!(
            code(FedError::InvalidArgument("table `t` already exists".into())),
            "22023"
        );
        assert_eq!(
            code(FedError::UnknownObject(
                "no table named `x`, no column".into()
            )),
            "42704"
        );
        // A table function's bad argument keeps its kind through DataFusion.
        let option = FedError::from(crate::table_function::arguments::argument_error(
            "pca",
            FedError::UnknownObject("unknown option `rank`: pca takes scale, center".into()),
        ));
        assert_eq!(code(option), "42704");
        let value = FedError::DataFusion(crate::table_function::arguments::invalid_argument(
            "t_test",
            "not supported here",
        ));
        assert_eq!(code(value), "22023");
    }

    #[test]
    fn datafusion_errors_map_through_their_fedsql_kind() {
        let column = FedError::from(DataFusionError::SchemaError(
            Box::new(datafusion::common::SchemaError::FieldNotFound {
                field: Box::new(datafusion::common::Column::from_name("nosuch")),
                valid_fields: vec![],
            }),
            Box::new(None),
        ));
        assert!(matches!(column, FedError::UnknownColumn(_)), "{column}");
        assert_eq!(error_info(&column).code, "42703");
        let internal = FedError::from(DataFusionError::Internal("oops".into()));
        assert_eq!(error_info(&internal).code, "XX000");
    }

    /// The name of an error's kind, as `docs/reference/errors.md` lists
    /// it. No `_` arm: a new kind does not compile until it is named here
    /// (and so, by the test below, documented).
    fn kind_name(error: &FedError) -> &'static str {
        match error {
            FedError::Refused { .. } => "Refused",
            FedError::Policy { .. } => "Policy",
            FedError::Withheld { .. } => "Withheld",
            FedError::Client { .. } => "Client",
            FedError::Timeout { .. } => "Timeout",
            FedError::Syntax(_) => "Syntax",
            FedError::UnknownTable(_) => "UnknownTable",
            FedError::UnknownColumn(_) => "UnknownColumn",
            FedError::UnknownObject(_) => "UnknownObject",
            FedError::AlreadyExists(_) => "AlreadyExists",
            FedError::InvalidArgument(_) => "InvalidArgument",
            FedError::Internal(_) => "Internal",
            FedError::DataFusion(_) => "DataFusion",
            FedError::Arrow(_) => "Arrow",
            FedError::Io(_) => "Io",
        }
    }

    #[test]
    fn every_error_kind_is_in_the_reference() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/errors.md");
        let page = std::fs::read_to_string(&path).unwrap();
        let text = || "x".to_string();
        // One error of every kind, with whether its SQLSTATE is the kind's
        // alone (DataFusion's and Arrow's follow their own kinds).
        let kinds = [
            (FedError::refused("x", None), true),
            (
                FedError::Policy {
                    client: text(),
                    rule: text(),
                    hint: None,
                },
                true,
            ),
            (FedError::Withheld { detail: text() }, true),
            (
                FedError::Client {
                    client: text(),
                    location: text(),
                    message: text(),
                },
                true,
            ),
            (
                FedError::Timeout {
                    client: text(),
                    location: text(),
                    after: text(),
                    hint: text(),
                },
                true,
            ),
            (FedError::Syntax(text()), true),
            (FedError::UnknownTable(text()), true),
            (FedError::UnknownColumn(text()), true),
            (FedError::UnknownObject(text()), true),
            (FedError::AlreadyExists(text()), true),
            (FedError::InvalidArgument(text()), true),
            (FedError::Internal(text()), true),
            (FedError::DataFusion(DataFusionError::Plan(text())), false),
            (
                FedError::Arrow(datafusion::arrow::error::ArrowError::DivideByZero),
                false,
            ),
            (FedError::Io(std::io::Error::other("x")), true),
        ];
        for (error, fixed_code) in kinds {
            let row = if fixed_code {
                format!(
                    "| `{}` | `{}` |",
                    kind_name(&error),
                    error_info(&error).code
                )
            } else {
                format!("| `{}` | by its kind |", kind_name(&error))
            };
            assert!(
                page.lines().any(|line| line.starts_with(&row)),
                "{} has no row starting `{row}`",
                path.display()
            );
        }
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
    }
}
