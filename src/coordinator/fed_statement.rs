//! fedsql's own statements, recognised in one place.
//!
//! `CREATE [OR REPLACE] FEDERATED TABLE`, `EXPLAIN [ANALYZE] FEDERATED`,
//! `SHOW CLIENTS [FROM|IN] table` and `SHOW PRIVACY BUDGET [FOR] table`
//! are fedsql's; everything else is DataFusion's SQL. The coordinator
//! dispatches on [`recognise`], and `fedsql serve` asks it whether a
//! statement answers with rows; the REPL runs every statement through the
//! coordinator. The statement is read with sqlparser's tokenizer, so
//! comments and line breaks between the words are read as SQL reads them
//! (`/* note */ EXPLAIN FEDERATED …` is fedsql's too), and the rest of the
//! statement is sliced out of the text as written.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};

/// One of fedsql's own statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FedStatement<'a> {
    /// `CREATE [OR REPLACE] FEDERATED …`: the whole text is parsed by
    /// [`crate::coordinator::ddl::parse_create_federated`] (a misspelt
    /// `TABLE` is ours too, so that the error names it).
    CreateFederatedTable,
    /// `EXPLAIN [ANALYZE] FEDERATED statement`.
    ExplainFederated { analyze: bool, statement: &'a str },
    /// `SHOW CLIENTS [FROM|IN] table`.
    ShowClients { table: &'a str },
    /// `SHOW PRIVACY BUDGET [FOR] table`.
    ShowPrivacyBudget { table: &'a str },
}

/// fedsql's statement `sql` is, if it is one of them (`None`: DataFusion's,
/// or text the tokenizer cannot read, which DataFusion then reports).
pub(crate) fn recognise(sql: &str) -> Option<FedStatement<'_>> {
    let dialect = GenericDialect {};
    let mut tokens: Vec<TokenWithSpan> = Vec::new();
    Tokenizer::new(&dialect, sql)
        .with_unescape(false)
        .tokenize_with_location_into_buf(&mut tokens)
        .ok()?;
    let mut offsets = Offsets::new(sql);
    // The leading words (upper case) and the byte offset after each.
    let mut words: Vec<(String, usize)> = Vec::new();
    for token in &tokens {
        match &token.token {
            Token::Whitespace(_) => continue,
            Token::Word(w) if w.quote_style.is_none() && words.len() < 5 => {
                words.push((w.value.to_ascii_uppercase(), offsets.byte(token.span.end)));
            }
            _ => break,
        }
    }
    let word = |n: usize| words.get(n).map_or("", |(w, _)| w.as_str());
    let rest = |n: usize| {
        let at = words[n].1;
        sql[at..].trim().trim_end_matches(';').trim()
    };
    match (word(0), word(1), word(2), word(3)) {
        ("CREATE", "FEDERATED", ..) | ("CREATE", "OR", "REPLACE", "FEDERATED") => {
            Some(FedStatement::CreateFederatedTable)
        }
        ("EXPLAIN", "ANALYZE", "FEDERATED", _) => Some(FedStatement::ExplainFederated {
            analyze: true,
            statement: rest(2),
        }),
        ("EXPLAIN", "FEDERATED", ..) => Some(FedStatement::ExplainFederated {
            analyze: false,
            statement: rest(1),
        }),
        ("SHOW", "CLIENTS", "FROM" | "IN", _) => Some(FedStatement::ShowClients { table: rest(2) }),
        ("SHOW", "CLIENTS", ..) => Some(FedStatement::ShowClients { table: rest(1) }),
        ("SHOW", "PRIVACY", "BUDGET", "FOR") => {
            Some(FedStatement::ShowPrivacyBudget { table: rest(3) })
        }
        ("SHOW", "PRIVACY", "BUDGET", _) => {
            Some(FedStatement::ShowPrivacyBudget { table: rest(2) })
        }
        _ => None,
    }
}

/// Maps the tokenizer's (line, column) locations, both 1-based and counted in
/// characters, to byte offsets into the text.
///
/// Tokens come in order, so each location is counted on from the last one
/// on its line: a script of one long line (a table of a thousand clients)
/// is read once, not once per token.
pub(crate) struct Offsets<'a> {
    sql: &'a str,
    /// Byte offset where each line starts.
    line_starts: Vec<usize>,
    /// The last location mapped: its line, its character on the line and
    /// its byte offset.
    last: (usize, usize, usize),
}

impl<'a> Offsets<'a> {
    pub(crate) fn new(sql: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(sql.match_indices('\n').map(|(i, _)| i + 1));
        Self {
            sql,
            line_starts,
            last: (1, 0, 0),
        }
    }

    pub(crate) fn byte(&mut self, location: Location) -> usize {
        let line = usize::try_from(location.line).unwrap_or(usize::MAX).max(1);
        let Some(&line_start) = self.line_starts.get(line - 1) else {
            return self.sql.len();
        };
        let chars = usize::try_from(location.column)
            .unwrap_or(usize::MAX)
            .saturating_sub(1);
        let (from_chars, from_byte) = match self.last {
            (last_line, last_chars, byte) if last_line == line && last_chars <= chars => {
                (last_chars, byte)
            }
            _ => (0, line_start),
        };
        let byte = self.sql[from_byte..]
            .char_indices()
            .nth(chars - from_chars)
            .map_or(self.sql.len(), |(i, _)| from_byte + i);
        self.last = (line, chars, byte);
        byte
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fedsqls_statements_are_recognised_however_written() {
        assert_eq!(
            recognise("create federated tabel t location 'x'"),
            Some(FedStatement::CreateFederatedTable)
        );
        assert_eq!(
            recognise("CREATE OR REPLACE FEDERATED TABLE t LOCATION 'x'"),
            Some(FedStatement::CreateFederatedTable)
        );
        assert_eq!(
            recognise("/* a note */ explain\n  federated SELECT count(*) FROM t;"),
            Some(FedStatement::ExplainFederated {
                analyze: false,
                statement: "SELECT count(*) FROM t"
            })
        );
        assert_eq!(
            recognise("EXPLAIN ANALYZE FEDERATED SELECT 'é', 1"),
            Some(FedStatement::ExplainFederated {
                analyze: true,
                statement: "SELECT 'é', 1"
            })
        );
        assert_eq!(
            recognise("-- who\nSHOW CLIENTS FROM clinic"),
            Some(FedStatement::ShowClients { table: "clinic" })
        );
        assert_eq!(
            recognise("show clients clinic"),
            Some(FedStatement::ShowClients { table: "clinic" })
        );
        assert_eq!(
            recognise("SHOW PRIVACY BUDGET FOR clinic;"),
            Some(FedStatement::ShowPrivacyBudget { table: "clinic" })
        );
        assert_eq!(
            recognise("SHOW PRIVACY BUDGET clinic"),
            Some(FedStatement::ShowPrivacyBudget { table: "clinic" })
        );
    }

    #[test]
    fn datafusions_statements_are_not_ours() {
        for sql in [
            "SELECT 1",
            "EXPLAIN SELECT 1",
            "SHOW TABLES",
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'x'",
            "SELECT 'EXPLAIN FEDERATED'",
            "\"EXPLAIN\" FEDERATED SELECT 1",
            "'unterminated",
        ] {
            assert_eq!(recognise(sql), None, "{sql}");
        }
    }
}
