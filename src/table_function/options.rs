//! The options string of a table function (`'maxit=50, weights=w'`,
//! `'scale=on'`, `'conf_level=0.9'`): one parser for every model and
//! statistic, one rule for key case (keys are read case-insensitively),
//! one reading of each kind of value (booleans accept on/off, true/false,
//! yes/no and 1/0; numbers must be finite, so `NaN` and `inf` are refused
//! everywhere), and one error for an unknown key that lists the valid ones.

use crate::error::{FedError, Result};

/// The options a call gave, in order (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    options: Vec<TableOption>,
}

/// One `key=value` option; the key lower-cased, the value trimmed.
#[derive(Debug, Clone, PartialEq)]
pub struct TableOption {
    pub key: String,
    pub value: String,
}

impl Options {
    /// Parses `key=value, key=value, ...` (empty entries are skipped); every
    /// key must be one of `valid`, the keys `function` takes.
    pub fn parse(function: &str, text: Option<&str>, valid: &[&str]) -> Result<Self> {
        let options = Self::parse_any(text)?;
        if let Some(o) = options.iter().find(|o| !valid.contains(&o.key.as_str())) {
            return Err(unknown_option(function, &o.key, valid));
        }
        Ok(options)
    }

    /// Parses the options without checking their keys, for a function whose
    /// valid keys depend on another option (`fedsgd`'s optimizer); it
    /// reports a key it does not take with [`unknown_option`].
    pub fn parse_any(text: Option<&str>) -> Result<Self> {
        let options = text
            .map(|t| t.split(','))
            .into_iter()
            .flatten()
            .filter(|o| !o.trim().is_empty())
            .map(|o| {
                o.split_once('=')
                    .map(|(k, v)| TableOption {
                        key: k.trim().to_ascii_lowercase(),
                        value: v.trim().to_string(),
                    })
                    .ok_or_else(|| {
                        FedError::InvalidArgument(format!(
                            "option `{}`: expected key=value",
                            o.trim()
                        ))
                    })
            })
            .collect::<Result<_>>()?;
        Ok(Self { options })
    }

    /// The options, in the order given.
    pub fn iter(&self) -> std::slice::Iter<'_, TableOption> {
        self.options.iter()
    }

    /// The last option of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&TableOption> {
        self.options.iter().rev().find(|o| o.key == key)
    }
}

impl<'a> IntoIterator for &'a Options {
    type Item = &'a TableOption;
    type IntoIter = std::slice::Iter<'a, TableOption>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The error for an option `function` does not take; `valid` lists the
/// keys it does.
pub(crate) fn unknown_option(function: &str, key: &str, valid: &[&str]) -> FedError {
    FedError::UnknownObject(format!(
        "unknown option `{key}`: {function} takes {}",
        valid.join(", ")
    ))
}

impl TableOption {
    /// The error for a value that cannot be used, saying why.
    pub fn bad(&self, what: &str) -> FedError {
        FedError::InvalidArgument(format!("option {}={}: {what}", self.key, self.value))
    }

    /// A finite number (`NaN` and infinities are refused).
    pub fn number(&self) -> Result<f64> {
        finite(&self.value).ok_or_else(|| self.bad("expected a finite number"))
    }

    /// Finite numbers separated by spaces (`'breaks=0 30 60'`).
    pub fn numbers(&self) -> Result<Vec<f64>> {
        self.value
            .split_whitespace()
            .map(|v| {
                finite(v).ok_or_else(|| self.bad("expected finite numbers separated by spaces"))
            })
            .collect()
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

    /// A confidence level: a number strictly between 0 and 1.
    pub fn conf_level(&self) -> Result<f64> {
        let v = self.number()?;
        if v > 0.0 && v < 1.0 {
            Ok(v)
        } else {
            Err(self.bad("the confidence level must be between 0 and 1"))
        }
    }

    /// A whole number (negative ones included).
    pub fn integer(&self) -> Result<i64> {
        self.value
            .parse()
            .map_err(|_| self.bad("expected a whole number"))
    }

    /// A whole number not below zero (a seed).
    pub fn unsigned(&self) -> Result<u64> {
        self.value
            .parse()
            .map_err(|_| self.bad("expected a whole number, not negative"))
    }

    /// A whole number of at least one.
    pub fn count(&self) -> Result<usize> {
        match self.integer()? {
            n if n >= 1 => Ok(n as usize),
            _ => Err(self.bad("must be at least 1")),
        }
    }

    /// `true`/`false`, also `on`/`off`, `yes`/`no` and `1`/`0`.
    pub fn boolean(&self) -> Result<bool> {
        match self.value.to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" | "1" => Ok(true),
            "false" | "off" | "no" | "0" => Ok(false),
            _ => Err(self.bad("expected true or false (on/off, yes/no, 1/0)")),
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

/// `text` as a finite number.
fn finite(text: &str) -> Option<f64> {
    text.parse::<f64>().ok().filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> TableOption {
        Options::parse_any(Some(text))
            .unwrap()
            .iter()
            .next()
            .unwrap()
            .clone()
    }

    #[test]
    fn keys_are_read_case_insensitively_and_values_checked() {
        let options = Options::parse_any(Some(" MaxIt = 5, , epsilon=1e-9")).unwrap();
        let options: Vec<_> = options.iter().collect();
        assert_eq!(options[0].key, "maxit");
        assert_eq!(options[0].count().unwrap(), 5);
        assert_eq!(options[1].positive().unwrap(), 1e-9);
        let err = Options::parse_any(Some("maxit")).unwrap_err().to_string();
        assert!(err.contains("expected key=value"), "{err}");
        assert!(
            one("maxit=0")
                .count()
                .unwrap_err()
                .to_string()
                .contains("at least 1")
        );
    }

    #[test]
    fn booleans_read_every_spelling() {
        for yes in ["on", "true", "TRUE", "yes", "1"] {
            assert!(one(&format!("scale={yes}")).boolean().unwrap(), "{yes}");
        }
        for no in ["off", "false", "No", "0"] {
            assert!(!one(&format!("scale={no}")).boolean().unwrap(), "{no}");
        }
        let err = one("scale=maybe").boolean().unwrap_err();
        assert!(matches!(err, FedError::InvalidArgument(_)), "{err}");
    }

    #[test]
    fn numbers_refuse_nan_and_infinities() {
        for bad in ["NaN", "nan", "inf", "-inf", "infinity", "x"] {
            let o = one(&format!("tolerance={bad}"));
            let err = o.number().unwrap_err();
            assert!(matches!(err, FedError::InvalidArgument(_)), "{err}");
            assert!(err.to_string().contains("finite"), "{err}");
            assert!(o.conf_level().is_err() && o.positive().is_err(), "{bad}");
            assert!(one(&format!("breaks=1 {bad}")).numbers().is_err(), "{bad}");
        }
        assert_eq!(
            one("breaks= 0 30  60").numbers().unwrap(),
            [0.0, 30.0, 60.0]
        );
        assert!(one("conf_level=1").conf_level().is_err());
        assert_eq!(one("conf_level=0.9").conf_level().unwrap(), 0.9);
    }

    #[test]
    fn an_unknown_key_lists_the_valid_ones() {
        let err =
            Options::parse("pca", Some("scale=on, rank=2"), &["scale", "center"]).unwrap_err();
        assert!(matches!(err, FedError::UnknownObject(_)), "{err}");
        assert_eq!(
            err.to_string(),
            "unknown option `rank`: pca takes scale, center"
        );
        let options = Options::parse("pca", Some("SCALE=on"), &["scale", "center"]).unwrap();
        assert!(options.get("scale").unwrap().boolean().unwrap());
        assert!(options.get("center").is_none());
    }
}
