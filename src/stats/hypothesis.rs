//! The alternative hypothesis of a test (`alternative=less`), as R names
//! it, for `t_test` and `cor_test`.

use crate::error::{FedError, Result};

/// The alternative hypothesis, as R names it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Alternative {
    TwoSided,
    Less,
    Greater,
}

impl Alternative {
    /// `two.sided` (or `two_sided`), `less` or `greater`.
    pub(crate) fn parse(value: &str) -> Result<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "two.sided" | "two_sided" | "two-sided" => Ok(Self::TwoSided),
            "less" => Ok(Self::Less),
            "greater" => Ok(Self::Greater),
            other => Err(FedError::InvalidArgument(format!(
                "option alternative={other}: expected two.sided, less or greater"
            ))),
        }
    }

    /// R's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::TwoSided => "two.sided",
            Self::Less => "less",
            Self::Greater => "greater",
        }
    }
}
