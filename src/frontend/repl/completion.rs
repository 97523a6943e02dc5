//! Tab completion at the REPL prompt (a rustyline [`Completer`]): backslash
//! commands at the start of a line, table names after `\d`, `\dt` and
//! `\clients`, and in SQL the names of tables, their columns, functions
//! (scalar, aggregate, window and table functions) and keywords.
//!
//! The names come from a [`Vocabulary`] the loop refreshes from the
//! catalog before each prompt (completion itself cannot wait on the
//! catalog), so a table created a moment ago completes at the next prompt.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Helper};

use crate::coordinator::context::FedContext;
use crate::frontend::repl::command::COMMANDS;

/// SQL words offered besides the catalog's names.
const KEYWORDS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "ORDER",
    "HAVING",
    "LIMIT",
    "AS",
    "AND",
    "OR",
    "NOT",
    "NULL",
    "IS",
    "IN",
    "BETWEEN",
    "LIKE",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "JOIN",
    "LEFT",
    "INNER",
    "ON",
    "WITH",
    "DISTINCT",
    "FILTER",
    "CREATE",
    "FEDERATED",
    "TABLE",
    "STORED",
    "CSV",
    "PARQUET",
    "LOCATION",
    "CLIENTS",
    "OPTIONS",
    "EXPLAIN",
    "ANALYZE",
    "SHOW",
    "SET",
    "DROP",
    "COPY",
    "TO",
    "DESC",
    "ASC",
    "ROLLUP",
    "CUBE",
    "UNION",
    "ALL",
];

/// The names a prompt can complete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Vocabulary {
    pub tables: BTreeSet<String>,
    pub columns: BTreeSet<String>,
    pub functions: BTreeSet<String>,
}

impl Vocabulary {
    /// The current names of `ctx`: its tables and their columns, and every
    /// registered function.
    pub(crate) async fn of(ctx: &FedContext) -> Self {
        let mut vocabulary = Vocabulary::default();
        if let Ok(tables) = ctx.tables().await {
            for table in tables {
                vocabulary
                    .columns
                    .extend(table.schema.fields().iter().map(|f| f.name().clone()));
                vocabulary.tables.insert(table.name);
            }
        }
        let state = ctx.session().state();
        vocabulary.functions.extend(
            state
                .scalar_functions()
                .keys()
                .chain(state.aggregate_functions().keys())
                .chain(state.window_functions().keys())
                .chain(state.table_functions().keys())
                .cloned(),
        );
        vocabulary
    }
}

/// The REPL's rustyline helper: completion only.
#[derive(Debug, Clone, Default)]
pub(crate) struct FedHelper {
    vocabulary: Arc<RwLock<Vocabulary>>,
}

impl FedHelper {
    /// Replaces the names offered (called before each prompt).
    pub(crate) fn set_vocabulary(&self, vocabulary: Vocabulary) {
        *self.vocabulary.write().expect("not poisoned") = vocabulary;
    }

    /// The completions of the word before `pos` in `line`: where it starts,
    /// and the candidates, sorted.
    pub(crate) fn candidates(&self, line: &str, pos: usize) -> (usize, Vec<String>) {
        let before = &line[..pos];
        let start = before
            .char_indices()
            .rev()
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '_' || *c == '\\'))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let word = &before[start..];
        let vocabulary = self.vocabulary.read().expect("not poisoned");
        let head = before[..start].trim_start();
        let mut found: BTreeSet<String> = BTreeSet::new();
        if head.is_empty() && word.starts_with('\\') {
            found.extend(
                COMMANDS
                    .iter()
                    .filter_map(|(usage, _)| usage.split(' ').next())
                    .filter(|name| name.starts_with(word))
                    .map(str::to_string),
            );
        } else if head.starts_with('\\') {
            let command = head.split_whitespace().next().unwrap_or("");
            if matches!(command, "\\d" | "\\dt" | "\\clients") {
                found.extend(prefixed(&vocabulary.tables, word));
            }
        } else if !word.is_empty() {
            found.extend(prefixed(&vocabulary.tables, word));
            found.extend(prefixed(&vocabulary.columns, word));
            found.extend(prefixed(&vocabulary.functions, word));
            // Keywords in the case the word is typed in.
            let upper = word.chars().next().is_some_and(char::is_uppercase);
            found.extend(
                KEYWORDS
                    .iter()
                    .filter(|k| k.to_lowercase().starts_with(&word.to_lowercase()))
                    .map(|k| {
                        if upper {
                            k.to_string()
                        } else {
                            k.to_lowercase()
                        }
                    }),
            );
        }
        (start, found.into_iter().collect())
    }
}

/// The names that start with `word`, ignoring case.
fn prefixed<'a>(names: &'a BTreeSet<String>, word: &'a str) -> impl Iterator<Item = String> + 'a {
    let word = word.to_lowercase();
    names
        .iter()
        .filter(move |name| name.to_lowercase().starts_with(&word))
        .cloned()
}

impl Completer for FedHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let (start, names) = self.candidates(line, pos);
        Ok((
            start,
            names
                .into_iter()
                .map(|name| Pair {
                    display: name.clone(),
                    replacement: name,
                })
                .collect(),
        ))
    }
}

impl Hinter for FedHelper {
    type Hint = String;
}

impl Highlighter for FedHelper {
    fn highlight<'l>(&self, line: &'l str, _pos: usize) -> Cow<'l, str> {
        Cow::Borrowed(line)
    }
}

impl Validator for FedHelper {}

impl Helper for FedHelper {}

#[cfg(test)]
mod tests {
    use super::*;

    async fn demo_helper() -> FedHelper {
        let ctx = FedContext::new();
        crate::frontend::demo::register_demo(&ctx).unwrap();
        let helper = FedHelper::default();
        helper.set_vocabulary(Vocabulary::of(&ctx).await);
        helper
    }

    #[tokio::test]
    async fn completes_commands_tables_columns_and_functions() {
        let helper = demo_helper().await;
        let complete = |line: &str| helper.candidates(line, line.len());
        assert_eq!(complete("\\cl"), (0, vec!["\\clients".to_string()]));
        assert_eq!(
            complete("\\d"),
            (
                0,
                vec![
                    "\\d".to_string(),
                    "\\digits".to_string(),
                    "\\dt".to_string()
                ]
            )
        );
        assert_eq!(complete("\\clients cli"), (9, vec!["clinic".to_string()]));
        let (start, names) = complete("SELECT avg(sys");
        assert_eq!((start, names), (11, vec!["systolic".to_string()]));
        let (_, names) = complete("SELECT * FROM gl");
        assert!(
            names.contains(&"glm".to_string()) && names.contains(&"glm_stats".to_string()),
            "{names:?}"
        );
        let (_, names) = complete("SELECT count(*) FROM clin");
        assert_eq!(names, ["clinic"]);
        let (_, names) = complete("SELECT region FROM clinic GRO");
        assert_eq!(names, ["GROUP", "grouping"]);
        let (_, names) = complete("select region from clinic gro");
        assert_eq!(names, ["group", "grouping"]);
        assert_eq!(complete("SELECT "), (7, vec![]));
    }
}
