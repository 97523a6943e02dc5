//! A table function's bad argument, reported one way: as a planning error
//! that keeps its [`FedError`] kind (a syntax error, an unknown option or
//! column, an invalid value), with the function's name in front, so that
//! `fedsql serve` sends the SQLSTATE of the kind and never has to guess it
//! from the message.

use datafusion::error::DataFusionError;

use crate::error::FedError;

/// `e`, a bad argument of `function`, as a planning error that keeps its
/// kind; its message is led by the function's name (once).
pub(crate) fn argument_error(function: &str, e: FedError) -> DataFusionError {
    let named = |m: String| {
        if m.starts_with(&format!("{function}:")) || m.starts_with(&format!("{function} ")) {
            m
        } else {
            format!("{function}: {m}")
        }
    };
    let e = match e {
        FedError::Syntax(m) => FedError::Syntax(named(m)),
        FedError::UnknownObject(m) => FedError::UnknownObject(named(m)),
        FedError::UnknownColumn(m) => FedError::UnknownColumn(named(m)),
        FedError::UnknownTable(m) => FedError::UnknownTable(named(m)),
        FedError::InvalidArgument(m) => FedError::InvalidArgument(named(m)),
        other => other,
    };
    DataFusionError::External(Box::new(e))
}

/// An invalid argument of `function` (a wrong count, a value out of range),
/// as [`argument_error`] reports it.
pub(crate) fn invalid_argument(function: &str, message: impl Into<String>) -> DataFusionError {
    argument_error(function, FedError::InvalidArgument(message.into()))
}

/// The columns of a list `'x1, x2, x3'` (at least one, no repeats).
pub(crate) fn column_list(text: &str) -> crate::Result<Vec<String>> {
    let columns: Vec<String> = text
        .split(',')
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect();
    if columns.is_empty() {
        return Err(FedError::InvalidArgument(
            "name at least one column, e.g. 'x1, x2'".into(),
        ));
    }
    for (i, c) in columns.iter().enumerate() {
        if columns[..i].contains(c) {
            return Err(FedError::InvalidArgument(format!(
                "column `{c}` is listed twice"
            )));
        }
    }
    Ok(columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(e: DataFusionError) -> FedError {
        match e {
            DataFusionError::External(inner) => *inner.downcast::<FedError>().unwrap(),
            other => panic!("not a fedsql error: {other}"),
        }
    }

    #[test]
    fn the_kind_is_kept_and_the_name_leads_once() {
        let e = kept(argument_error(
            "pca",
            FedError::UnknownObject("unknown option `rank`: pca takes scale, center".into()),
        ));
        assert!(matches!(e, FedError::UnknownObject(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "pca: unknown option `rank`: pca takes scale, center"
        );
        let e = kept(invalid_argument("t_test", "t_test takes 2 to 4 arguments"));
        assert!(matches!(e, FedError::InvalidArgument(_)), "{e}");
        assert_eq!(e.to_string(), "t_test takes 2 to 4 arguments");
        let e = kept(argument_error("lm", FedError::Syntax("bad formula".into())));
        assert!(matches!(e, FedError::Syntax(_)), "{e}");
    }

    #[test]
    fn column_lists() {
        assert_eq!(column_list(" a, b ,c").unwrap(), ["a", "b", "c"]);
        assert!(column_list(" , ").is_err());
        assert!(
            column_list("a, a")
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
    }
}
