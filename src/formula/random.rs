//! lme4's random-effect terms: `y ~ x + (1 + x | g)` is split into the
//! fixed-effect formula `y ~ x`, read by [`super::parse`] as any other,
//! and the random terms `(1 + x | g)`: the effects that vary by group
//! (a formula right-hand side) and the grouping column.
//!
//! `(1 | g)` is a random intercept, `(1 + x | g)` an intercept and a slope
//! with their correlation, `(0 + x | g)` (or `(-1 + x | g)`) a slope alone.
//! `||` (uncorrelated terms) and nested groupings `g1/g2` are not read.

use crate::error::{FedError, Result};

/// One `(effects | group)` term.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RandomTerm {
    /// The effects, as the right-hand side of a formula (`1 + x`, `0 + x`).
    pub effects: String,
    /// The grouping column (`_client` for the site).
    pub group: String,
}

impl std::fmt::Display for RandomTerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({} | {})", self.effects, self.group)
    }
}

/// Splits `text` at `+` outside parentheses, keeping each part's text.
fn top_level_terms(text: &str) -> Vec<String> {
    let (mut depth, mut parts, mut current) = (0i32, Vec::new(), String::new());
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if c == '+' && depth == 0 {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    parts.push(current);
    parts
}

/// The `(effects | group)` inside a term, if it is one.
fn random_term(term: &str) -> Option<std::result::Result<RandomTerm, String>> {
    let inner = term.trim().strip_prefix('(')?.strip_suffix(')')?;
    let (effects, group) = inner.split_once('|')?;
    if group.starts_with('|') {
        return Some(Err(
            "`||` (uncorrelated random effects) is not supported; write the terms separately"
                .into(),
        ));
    }
    let (effects, group) = (effects.trim(), group.trim());
    if effects.is_empty() {
        return Some(Err(format!("`{}`: no effects before `|`", term.trim())));
    }
    let plain = !group.is_empty()
        && group
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    if !plain {
        return Some(Err(format!(
            "`{}`: the grouping must be one column (`_client` for the site, or a column whose levels lie within sites)",
            term.trim()
        )));
    }
    Some(Ok(RandomTerm {
        effects: effects.to_string(),
        group: group.to_string(),
    }))
}

/// Splits a mixed-model formula into its fixed-effect formula and its
/// random terms.
pub(crate) fn split_random_terms(text: &str) -> Result<(String, Vec<RandomTerm>)> {
    let err = |m: String| FedError::InvalidArgument(format!("formula '{text}': {m}"));
    let (lhs, rhs) = text
        .split_once('~')
        .ok_or_else(|| err("expected `response ~ terms + (1 | group)`".into()))?;
    let mut fixed = Vec::new();
    let mut random = Vec::new();
    for (i, part) in top_level_terms(rhs).into_iter().enumerate() {
        // A leading `- 1` stays with the term it follows; only whole `+`
        // parts can be random terms.
        match random_term(&part) {
            Some(term) => random.push(term.map_err(err)?),
            None if part.trim().is_empty() && i == 0 => {}
            None => fixed.push(part.trim().to_string()),
        }
    }
    let fixed = if fixed.iter().all(|t| t.is_empty()) {
        "1".to_string()
    } else {
        fixed.join(" + ")
    };
    Ok((format!("{} ~ {fixed}", lhs.trim()), random))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> (String, Vec<String>) {
        let (fixed, random) = split_random_terms(text).unwrap();
        (fixed, random.iter().map(|r| r.to_string()).collect())
    }

    #[test]
    fn random_terms_leave_the_fixed_formula() {
        assert_eq!(
            split("y ~ x1 + x2 + (1 | _client)"),
            ("y ~ x1 + x2".into(), vec!["(1 | _client)".into()])
        );
        assert_eq!(
            split("y ~ (1 + x1 | ward) + x1"),
            ("y ~ x1".into(), vec!["(1 + x1 | ward)".into()])
        );
        assert_eq!(
            split("y ~ 1 + (0 + x1 | _client)"),
            ("y ~ 1".into(), vec!["(0 + x1 | _client)".into()])
        );
        assert_eq!(split("y ~ (1|g)"), ("y ~ 1".into(), vec!["(1 | g)".into()]));
        // Parentheses that are not random terms stay.
        assert_eq!(
            split("y ~ I((x1 + 1) * 2) + log(x2) + (1 | g)"),
            (
                "y ~ I((x1 + 1) * 2) + log(x2)".into(),
                vec!["(1 | g)".into()]
            )
        );
    }

    #[test]
    fn what_is_not_read_is_named() {
        for (text, expected) in [
            ("y ~ x + (1 || g)", "`||`"),
            ("y ~ x + (1 | g1/g2)", "one column"),
            ("y ~ x + ( | g)", "no effects"),
            ("y x", "expected"),
        ] {
            let e = split_random_terms(text).unwrap_err().to_string();
            assert!(e.contains(expected), "{text}: {e}");
        }
    }
}
