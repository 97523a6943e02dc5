//! Who the analyst is: a worker's named tokens (`[tokens]` in its TOML, a
//! name per token file). The single-token flag is one analyst, named
//! [`DEFAULT_ANALYST`]. A request's token is compared with every token in
//! constant time (no early exit), and names the analyst whose DP budget
//! the request spends.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{FedError, Result};

/// The analyst of the single `--token-file` token.
pub(crate) const DEFAULT_ANALYST: &str = "default";

/// The tokens a worker accepts, by analyst name.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    /// Name and SHA-256 of the token (compared in constant time, length included).
    named: Vec<(String, [u8; 32])>,
}

impl Tokens {
    /// The single token (if not empty) as [`DEFAULT_ANALYST`], and the named ones.
    pub fn new(token: &str, named: &[(String, String)]) -> Self {
        let digest = |t: &str| -> [u8; 32] { Sha256::digest(t.as_bytes()).into() };
        let mut tokens: Vec<(String, [u8; 32])> = Vec::new();
        if !token.is_empty() {
            tokens.push((DEFAULT_ANALYST.to_string(), digest(token)));
        }
        tokens.extend(named.iter().map(|(name, t)| (name.clone(), digest(t))));
        Self { named: tokens }
    }

    /// The analysts' names, in the order given.
    pub fn names(&self) -> Vec<String> {
        self.named.iter().map(|(name, _)| name.clone()).collect()
    }

    /// The analyst whose token `given` is, if any.
    pub fn analyst(&self, given: &[u8]) -> Option<&str> {
        let given: [u8; 32] = Sha256::digest(given).into();
        let mut found = None;
        for (name, token) in &self.named {
            if bool::from(token.ct_eq(&given)) && found.is_none() {
                found = Some(name.as_str());
            }
        }
        found
    }
}

/// Refuses `[tokens]` that would share a ledger: a name the single token
/// goes by ([`DEFAULT_ANALYST`]), or one token under two names (only the
/// first name's ledger would ever be debited).
pub(crate) fn check_names(single: &str, named: &[(String, String)]) -> Result<()> {
    for (i, (name, token)) in named.iter().enumerate() {
        if name == DEFAULT_ANALYST {
            return Err(FedError::Syntax(format!(
                "[tokens] {name}: the name is reserved (the ledger of the single token_file); choose another"
            )));
        }
        let twice = (!single.is_empty() && token == single)
            || named[..i].iter().any(|(_, earlier)| earlier == token);
        if twice {
            return Err(FedError::Syntax(format!(
                "[tokens] {name}: the same token is given under another name; every analyst needs a token of their own (their privacy budget is kept by token)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_token_names_its_analyst() {
        let tokens = Tokens::new(
            "single",
            &[
                ("ana".into(), "t-ana".into()),
                ("bob".into(), "t-bob".into()),
            ],
        );
        assert_eq!(tokens.analyst(b"single"), Some(DEFAULT_ANALYST));
        assert_eq!(tokens.analyst(b"t-bob"), Some("bob"));
        assert_eq!(tokens.analyst(b"t-bo"), None);
        assert_eq!(Tokens::new("", &[]).analyst(b""), None);
    }
}
