//! The exit code of a non-interactive run (`fedsql -c … -f …`), from the
//! kind of its error: a pipeline can tell a refusal by a data owner from
//! an error in the SQL, a site that did not answer, and a bug.
//!
//! The code follows the error's kind ([`FedError`]'s variant, and for an
//! error DataFusion raised itself, DataFusion's kind), never its message,
//! as the SQLSTATE of `fedsql serve` does
//! ([`crate::frontend::pgwire`]'s `sqlstate` module).

use datafusion::error::DataFusionError;

use crate::error::FedError;

/// The exit codes of `fedsql`, as `fedsql --help` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitCode {
    /// Every statement and command succeeded (or the reader of the output
    /// went away, as with `| head -1`).
    Success = 0,
    /// Another failure: a script that cannot be read, output that cannot
    /// be written, a resource limit.
    Other = 1,
    /// A usage error on the command line (clap's code).
    Usage = 2,
    /// An error in the SQL: it does not parse or plan (unknown table,
    /// column or function, a bad argument or setting, a value it cannot
    /// compute).
    Sql = 3,
    /// Refused: the exposure check or a site's disclosure policy turned the
    /// query away.
    Refused = 4,
    /// A site failed or did not answer in time.
    Site = 5,
    /// A failure of fedsql itself: a bug.
    Internal = 6,
}

impl ExitCode {
    /// The code of a run that ended with `error`.
    pub fn of(error: &FedError) -> Self {
        if error.is_broken_pipe() {
            return ExitCode::Success;
        }
        match error {
            FedError::Refused { .. } | FedError::Policy { .. } | FedError::Withheld { .. } => {
                ExitCode::Refused
            }
            FedError::Client { .. } | FedError::Timeout { .. } => ExitCode::Site,
            FedError::Syntax(_)
            | FedError::UnknownTable(_)
            | FedError::UnknownColumn(_)
            | FedError::UnknownObject(_)
            | FedError::AlreadyExists(_)
            | FedError::InvalidArgument(_) => ExitCode::Sql,
            FedError::Internal(_) => ExitCode::Internal,
            FedError::DataFusion(e) => of_datafusion(e),
            FedError::Arrow(e) => of_arrow(e),
            FedError::Io(_) => ExitCode::Other,
        }
    }

    /// The number the process exits with.
    pub fn code(self) -> u8 {
        self as u8
    }
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(code: ExitCode) -> Self {
        std::process::ExitCode::from(code.code())
    }
}

fn of_datafusion(e: &DataFusionError) -> ExitCode {
    match e {
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            of_datafusion(inner)
        }
        DataFusionError::Shared(inner) => of_datafusion(inner),
        DataFusionError::Collection(errors) => {
            errors.first().map_or(ExitCode::Internal, of_datafusion)
        }
        DataFusionError::External(inner) => match inner.downcast_ref::<FedError>() {
            Some(fed) => ExitCode::of(fed),
            None => match inner.downcast_ref::<DataFusionError>() {
                Some(df) => of_datafusion(df),
                None => ExitCode::Internal,
            },
        },
        DataFusionError::SQL(..)
        | DataFusionError::SchemaError(..)
        | DataFusionError::NotImplemented(_)
        | DataFusionError::Plan(_)
        | DataFusionError::Configuration(_)
        | DataFusionError::Execution(_) => ExitCode::Sql,
        DataFusionError::ArrowError(arrow, _) => of_arrow(arrow),
        DataFusionError::IoError(_) | DataFusionError::ResourcesExhausted(_) => ExitCode::Other,
        _ => ExitCode::Internal,
    }
}

fn of_arrow(e: &datafusion::arrow::error::ArrowError) -> ExitCode {
    use datafusion::arrow::error::ArrowError;
    match e {
        ArrowError::DivideByZero
        | ArrowError::CastError(_)
        | ArrowError::ParseError(_)
        | ArrowError::InvalidArgumentError(_)
        | ArrowError::ComputeError(_)
        | ArrowError::ArithmeticOverflow(_) => ExitCode::Sql,
        ArrowError::IoError(..) => ExitCode::Other,
        _ => ExitCode::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_code() {
        let policy = FedError::Policy {
            client: "a".into(),
            rule: "k".into(),
            hint: None,
        };
        assert_eq!(ExitCode::of(&policy), ExitCode::Refused);
        assert_eq!(
            ExitCode::of(&FedError::refused("median", None)),
            ExitCode::Refused
        );
        assert_eq!(
            ExitCode::of(&FedError::Withheld { detail: "x".into() }),
            ExitCode::Refused
        );
        let timeout = FedError::Timeout {
            client: "a".into(),
            location: "grpc://h:1".into(),
            after: "1s".into(),
            hint: "h".into(),
        };
        assert_eq!(ExitCode::of(&timeout), ExitCode::Site);
        assert_eq!(ExitCode::of(&FedError::Syntax("x".into())), ExitCode::Sql);
        assert_eq!(
            ExitCode::of(&FedError::Internal("x".into())),
            ExitCode::Internal
        );
        assert_eq!(
            ExitCode::of(&FedError::Io(std::io::Error::other("disk full"))),
            ExitCode::Other
        );
        let broken = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "pipe");
        assert_eq!(ExitCode::of(&FedError::Io(broken)), ExitCode::Success);
    }

    #[test]
    fn a_kind_carried_through_datafusion_keeps_its_code() {
        let carried = DataFusionError::Context(
            "while planning".into(),
            Box::new(DataFusionError::External(Box::new(FedError::Policy {
                client: "a".into(),
                rule: "k".into(),
                hint: None,
            }))),
        );
        assert_eq!(
            ExitCode::of(&FedError::DataFusion(carried)),
            ExitCode::Refused
        );
        let plan = DataFusionError::Plan("Invalid function 'nope'".into());
        assert_eq!(ExitCode::of(&FedError::DataFusion(plan)), ExitCode::Sql);
        let internal = DataFusionError::Internal("oops".into());
        assert_eq!(ExitCode::of(&FedError::from(internal)), ExitCode::Internal);
    }
}
