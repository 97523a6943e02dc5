//! The options string of a model function (`'maxit=50, weights=w'`): one
//! parser for every model, one rule for key case (keys are read
//! case-insensitively), one set of value checks, and one error for an
//! unknown key that lists the valid ones.

use crate::error::{FedError, Result};

/// One `key=value` option; the key lower-cased, the value trimmed.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOption {
    pub key: String,
    pub value: String,
}

/// Parses `key=value, key=value, ...` (empty entries are skipped).
pub fn parse_options(text: Option<&str>) -> Result<Vec<ModelOption>> {
    text.map(|t| t.split(','))
        .into_iter()
        .flatten()
        .filter(|o| !o.trim().is_empty())
        .map(|o| {
            o.split_once('=')
                .map(|(k, v)| ModelOption {
                    key: k.trim().to_ascii_lowercase(),
                    value: v.trim().to_string(),
                })
                .ok_or_else(|| {
                    FedError::InvalidArgument(format!("option `{}`: expected key=value", o.trim()))
                })
        })
        .collect()
}

/// The error for an option `function` does not take; `valid` lists the
/// keys it does.
pub fn unknown_option(function: &str, key: &str, valid: &[&str]) -> FedError {
    FedError::UnknownObject(format!(
        "unknown option `{key}`: {function} takes {}",
        valid.join(", ")
    ))
}

impl ModelOption {
    /// The error for a value that cannot be used, saying why.
    pub fn bad(&self, what: &str) -> FedError {
        FedError::InvalidArgument(format!("option {}={}: {what}", self.key, self.value))
    }

    /// A finite number.
    pub fn number(&self) -> Result<f64> {
        self.value
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| self.bad("expected a number"))
    }

    /// A number above zero.
    pub fn positive(&self) -> Result<f64> {
        let v = self.number()?;
        if v > 0.0 {
            Ok(v)
        } else {
            Err(self.bad("must be positive"))
        }
    }

    /// A number not below zero.
    pub fn non_negative(&self) -> Result<f64> {
        let v = self.number()?;
        if v >= 0.0 {
            Ok(v)
        } else {
            Err(self.bad("must not be negative"))
        }
    }

    /// A number in [0, 1).
    pub fn fraction(&self) -> Result<f64> {
        let v = self.number()?;
        if (0.0..1.0).contains(&v) {
            Ok(v)
        } else {
            Err(self.bad("must be in [0, 1)"))
        }
    }

    /// A whole number (negative ones included).
    pub fn integer(&self) -> Result<i64> {
        self.value
            .parse()
            .map_err(|_| self.bad("expected a whole number"))
    }

    /// A whole number of at least one.
    pub fn count(&self) -> Result<usize> {
        match self.integer()? {
            n if n >= 1 => Ok(n as usize),
            _ => Err(self.bad("must be at least 1")),
        }
    }

    /// `true`/`false` (also `on`/`off`, `yes`/`no`, `1`/`0`).
    pub fn boolean(&self) -> Result<bool> {
        match self.value.to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" | "1" => Ok(true),
            "false" | "off" | "no" | "0" => Ok(false),
            _ => Err(self.bad("expected true or false")),
        }
    }

    /// One of `choices`, case-insensitively.
    pub fn choice<'a>(&self, choices: &[&'a str]) -> Result<&'a str> {
        let value = self.value.to_ascii_lowercase();
        choices
            .iter()
            .find(|c| **c == value)
            .copied()
            .ok_or_else(|| self.bad(&format!("use {}", choices.join(" or "))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_case_insensitively_and_values_checked() {
        let options = parse_options(Some(" MaxIt = 5, , epsilon=1e-9")).unwrap();
        assert_eq!(options[0].key, "maxit");
        assert_eq!(options[0].count().unwrap(), 5);
        assert_eq!(options[1].positive().unwrap(), 1e-9);
        let err = parse_options(Some("maxit")).unwrap_err().to_string();
        assert!(err.contains("expected key=value"), "{err}");
        let zero = &parse_options(Some("maxit=0")).unwrap()[0];
        assert!(zero.count().unwrap_err().to_string().contains("at least 1"));
        let err = unknown_option("glm", "maxiter", &["maxit", "epsilon"]).to_string();
        assert_eq!(err, "unknown option `maxiter`: glm takes maxit, epsilon");
    }
}
