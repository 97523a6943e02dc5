//! What a statement received over the wire is, before it runs.
//!
//! Drivers send, besides queries, statements a federation has no use for
//! but must accept: `BEGIN`/`COMMIT`/`ROLLBACK` (nothing here writes, so a
//! transaction is only a status), `SET datestyle`, `SET extra_float_digits`,
//! `SHOW standard_conforming_strings`, `DISCARD ALL`. Those are answered by
//! the connection itself ([`Statement::Session`]). `SET statement_timeout`
//! sets the connection's timeout. Everything else — queries, fedsql's own
//! statements (`CREATE FEDERATED TABLE`, `EXPLAIN FEDERATED`, `SHOW
//! CLIENTS`), DataFusion's `SET datafusion.*` — runs through
//! [`FedContext::sql`](crate::FedContext::sql) ([`Statement::Fed`]), with
//! catalog queries first rewritten from PostgreSQL's dialect.
//!
//! Whether a statement may run is not decided here: on a server started
//! without `--allow-ddl`, [`FedContext::sql`](crate::FedContext::sql)
//! refuses COPY, DDL, DML and statements that name files from the plan it
//! is about to run ([`crate::coordinator::gate`]), so that no reading of
//! the text (a comment hint, a quote, an `EXPLAIN` in front) can differ
//! from what runs. Here the statement is only read, with the tokenizer of
//! the dialect that runs it, for what the connection answers itself and
//! for the command tag a DDL statement answers with. `COPY (query) TO
//! STDOUT` is read here too ([`super::copy_out`]): only its query runs.

use std::time::Duration;

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use super::catalog;
use crate::coordinator::fed_statement;
use crate::error::{FedError, Result};

/// One statement, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Statement {
    /// Nothing but whitespace and comments.
    Empty,
    /// Answered by the connection.
    Session(SessionStatement),
    /// Runs through `FedContext::sql`: the text to run, and whether it
    /// returns rows (a query) or only a command tag.
    Fed { sql: String, kind: FedKind },
    /// `COPY (query) TO STDOUT`: the query runs through `FedContext::sql`
    /// and its rows go to the client as COPY data (nothing is written at
    /// the server, so it needs no `--allow-ddl`).
    CopyOut(super::copy_out::CopyOut),
}

/// How a statement run by `FedContext::sql` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FedKind {
    /// Rows (a query, EXPLAIN, SHOW ...): planned before it runs.
    Query,
    /// A command: runs when executed and answers with this tag.
    Command(String),
}

/// Statements a connection answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionStatement {
    Begin,
    Commit,
    Rollback,
    /// `SAVEPOINT`, `RELEASE`, `DISCARD`, `DEALLOCATE`, `SET TRANSACTION`,
    /// `LISTEN`: accepted, with this tag.
    Accept(String),
    /// `SET name = value` of a PostgreSQL setting (kept, shown by `SHOW`).
    Set {
        name: String,
        value: String,
    },
    /// `SET statement_timeout`: `None` is no timeout.
    SetTimeout(Option<Duration>),
    /// `RESET name` (`None`: `RESET ALL`).
    Reset(Option<String>),
    /// `SHOW name` of a PostgreSQL setting: one row, one text column.
    Show(String),
}

/// The words a statement starts with, upper-cased, and its tokens.
struct Words {
    tokens: Vec<Token>,
}

impl Words {
    fn new(sql: &str) -> Result<Self> {
        let dialect = GenericDialect {};
        let tokens = Tokenizer::new(&dialect, sql)
            .tokenize()
            .map_err(|e| FedError::Syntax(format!("cannot read the SQL: {e}")))?
            .into_iter()
            .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon))
            .collect();
        Ok(Self { tokens })
    }

    /// The n-th token as an upper-case word ("" if it is not a word).
    fn word(&self, n: usize) -> String {
        match self.tokens.get(n) {
            Some(Token::Word(w)) => w.value.to_ascii_uppercase(),
            _ => String::new(),
        }
    }

    /// The text value of tokens from `n` on: words, numbers and strings
    /// without their quotes, joined by spaces.
    fn value_from(&self, n: usize) -> String {
        self.tokens[n.min(self.tokens.len())..]
            .iter()
            .map(token_text)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn token_text(token: &Token) -> String {
    match token {
        Token::Word(w) => w.value.clone(),
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => s.clone(),
        Token::Number(n, _) => n.clone(),
        other => other.to_string(),
    }
}

/// Classifies one statement (no `;` inside). `allow_ddl` is the server's
/// `--allow-ddl`.
pub(crate) fn classify(sql: &str, allow_ddl: bool) -> Result<Statement> {
    let sql = sql.trim().trim_end_matches(';').trim();
    let words = match Words::new(sql) {
        Ok(words) => words,
        // Let fedsql's own parser say what is wrong (it runs nothing it
        // cannot read).
        Err(_) => {
            return Ok(Statement::Fed {
                sql: sql.to_string(),
                kind: FedKind::Query,
            });
        }
    };
    if words.tokens.is_empty() {
        return Ok(Statement::Empty);
    }
    let first = words.word(0);
    let second = words.word(1);
    let session = |s| Ok(Statement::Session(s));
    let accept = |tag: &str| Ok(Statement::Session(SessionStatement::Accept(tag.into())));
    match first.as_str() {
        "BEGIN" => return session(SessionStatement::Begin),
        "START" if second == "TRANSACTION" => return session(SessionStatement::Begin),
        "COMMIT" | "END" => return session(SessionStatement::Commit),
        "ROLLBACK" | "ABORT" if second == "TO" => return accept("ROLLBACK"),
        "ROLLBACK" | "ABORT" => return session(SessionStatement::Rollback),
        "SAVEPOINT" => return accept("SAVEPOINT"),
        "RELEASE" => return accept("RELEASE"),
        "DISCARD" => return accept("DISCARD ALL"),
        "DEALLOCATE" => return accept("DEALLOCATE"),
        "LISTEN" | "UNLISTEN" => return accept(&first),
        "SET" => return classify_set(sql, &words),
        "RESET" => {
            let name = words.value_from(1);
            return session(SessionStatement::Reset(
                (!name.eq_ignore_ascii_case("all")).then(|| name.to_ascii_lowercase()),
            ));
        }
        "SHOW" => {
            // `a.b.c` is three words and two periods.
            let name = words.value_from(1).replace(" . ", ".").to_ascii_lowercase();
            if fed_statement::recognise(sql).is_none() && !is_datafusion_show(&name) {
                return session(SessionStatement::Show(name));
            }
        }
        _ => {}
    }
    if first == "COPY"
        && let Some(copy) = super::copy_out::read(sql)
    {
        return Ok(Statement::CopyOut(copy?));
    }
    // Statements that answer with a command tag rather than rows run when
    // executed. Without --allow-ddl they are planned like queries, so that
    // the gate refuses them when they are parsed (`Parse` of the extended
    // protocol), not later.
    let command = allow_ddl
        && matches!(
            first.as_str(),
            "CREATE"
                | "DROP"
                | "ALTER"
                | "COPY"
                | "INSERT"
                | "UPDATE"
                | "DELETE"
                | "TRUNCATE"
                | "MERGE"
                | "PREPARE"
                | "EXECUTE"
        );
    if command {
        return Ok(Statement::Fed {
            sql: sql.to_string(),
            kind: FedKind::Command(command_tag(&words)),
        });
    }
    let sql = if catalog::is_catalog_query(sql) {
        catalog::compat_rewrite(sql).unwrap_or_else(|| sql.to_string())
    } else {
        sql.to_string()
    };
    Ok(Statement::Fed {
        sql,
        kind: FedKind::Query,
    })
}

/// `SHOW` forms that DataFusion answers (fedsql's own are
/// [`fed_statement::recognise`]'s).
fn is_datafusion_show(name: &str) -> bool {
    name.starts_with("datafusion.")
        || matches!(name, "all" | "tables" | "functions")
        || name.starts_with("columns")
}

fn classify_set(sql: &str, words: &Words) -> Result<Statement> {
    let mut at = 1;
    if matches!(words.word(at).as_str(), "SESSION" | "LOCAL") {
        at += 1;
    }
    let session = |s| Ok(Statement::Session(s));
    match words.word(at).as_str() {
        "TRANSACTION" | "CHARACTERISTICS" => {
            return session(SessionStatement::Accept("SET".into()));
        }
        "TIME" if words.word(at + 1) == "ZONE" => {
            return session(SessionStatement::Set {
                name: "timezone".into(),
                value: words.value_from(at + 2),
            });
        }
        "NAMES" => {
            return session(SessionStatement::Set {
                name: "client_encoding".into(),
                value: words.value_from(at + 1),
            });
        }
        _ => {}
    }
    // name [. name]* {TO | =} value
    let mut name = String::new();
    let mut i = at;
    while let Some(token) = words.tokens.get(i) {
        match token {
            Token::Eq => break,
            Token::Word(w) if w.value.eq_ignore_ascii_case("to") => break,
            Token::Word(w) => name.push_str(&w.value),
            Token::Period => name.push('.'),
            _ => break,
        }
        i += 1;
    }
    let name = name.to_ascii_lowercase();
    let value = words.value_from(i + 1);
    if name.starts_with("datafusion.") || name.starts_with("fedsql.") {
        return Ok(Statement::Fed {
            sql: sql.to_string(),
            kind: FedKind::Command("SET".into()),
        });
    }
    if name == "statement_timeout" {
        return session(SessionStatement::SetTimeout(parse_timeout(&value)?));
    }
    if name.is_empty() {
        return Err(FedError::Syntax(format!(
            "cannot read `{sql}`: SET name TO value"
        )));
    }
    session(SessionStatement::Set { name, value })
}

/// A `statement_timeout` value: milliseconds, or a number with a unit
/// (`ms`, `s`, `min`, `h`); 0 or `default` is no timeout.
pub(crate) fn parse_timeout(value: &str) -> Result<Option<Duration>> {
    let value = value.trim().to_ascii_lowercase();
    if value.is_empty() || value == "default" {
        return Ok(None);
    }
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let number: f64 = number.parse().map_err(|_| invalid_timeout(&value))?;
    let millis = match unit.trim() {
        "" | "ms" => number,
        "s" => number * 1e3,
        "min" => number * 60e3,
        "h" => number * 3600e3,
        _ => return Err(invalid_timeout(&value)),
    };
    Ok((millis > 0.0).then(|| Duration::from_secs_f64(millis / 1e3)))
}

fn invalid_timeout(value: &str) -> FedError {
    FedError::InvalidArgument(format!(
        "invalid value for statement_timeout: \"{value}\" (milliseconds, or a number with ms, s, min or h)"
    ))
}

/// The command tag PostgreSQL sends for a statement (`CREATE TABLE`, ...).
fn command_tag(words: &Words) -> String {
    let first = words.word(0);
    match first.as_str() {
        "CREATE" | "DROP" | "ALTER" => {
            let mut i = 1;
            while matches!(
                words.word(i).as_str(),
                "OR" | "REPLACE" | "FEDERATED" | "EXTERNAL" | "UNBOUNDED" | "TEMPORARY" | "TEMP"
            ) {
                i += 1;
            }
            format!("{first} {}", words.word(i))
        }
        "INSERT" => "INSERT 0".into(),
        _ => first,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(sql: &str) -> SessionStatement {
        match classify(sql, false).unwrap() {
            Statement::Session(s) => s,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn transactions_and_settings_are_answered_by_the_connection() {
        assert_eq!(session("BEGIN"), SessionStatement::Begin);
        assert_eq!(
            session("start transaction read only"),
            SessionStatement::Begin
        );
        assert_eq!(session("COMMIT;"), SessionStatement::Commit);
        assert_eq!(session("rollback"), SessionStatement::Rollback);
        assert_eq!(
            session("SET datestyle TO 'ISO, MDY'"),
            SessionStatement::Set {
                name: "datestyle".into(),
                value: "ISO, MDY".into()
            }
        );
        assert_eq!(
            session("set extra_float_digits = 3"),
            SessionStatement::Set {
                name: "extra_float_digits".into(),
                value: "3".into()
            }
        );
        assert_eq!(
            session("SET statement_timeout = '2s'"),
            SessionStatement::SetTimeout(Some(Duration::from_secs(2)))
        );
        assert_eq!(
            session("SET statement_timeout TO 0"),
            SessionStatement::SetTimeout(None)
        );
        assert_eq!(
            session("SHOW standard_conforming_strings"),
            SessionStatement::Show("standard_conforming_strings".into())
        );
    }

    #[test]
    fn queries_and_fedsql_statements_go_to_the_context() {
        let query = classify("SELECT avg(age) FROM clinic", false).unwrap();
        assert_eq!(
            query,
            Statement::Fed {
                sql: "SELECT avg(age) FROM clinic".into(),
                kind: FedKind::Query
            }
        );
        assert!(matches!(
            classify("SET datafusion.execution.batch_size = 1024", false).unwrap(),
            Statement::Fed {
                kind: FedKind::Command(_),
                ..
            }
        ));
        assert!(matches!(
            classify("SHOW CLIENTS clinic", false).unwrap(),
            Statement::Fed {
                kind: FedKind::Query,
                ..
            }
        ));
        assert_eq!(classify("  ; ", false).unwrap(), Statement::Empty);
    }

    #[test]
    fn ddl_is_a_command_only_with_allow_ddl() {
        // Without --allow-ddl it is planned at once, where the gate of
        // `FedContext::sql` refuses it (see `coordinator::gate`).
        for sql in [
            "CREATE FEDERATED TABLE t STORED AS CSV LOCATION '/etc/'",
            "COPY (SELECT 1) TO '/tmp/x.csv'",
            "DROP TABLE clinic",
        ] {
            assert_eq!(
                classify(sql, false).unwrap(),
                Statement::Fed {
                    sql: sql.into(),
                    kind: FedKind::Query
                }
            );
        }
        assert_eq!(
            classify("CREATE FEDERATED TABLE t STORED AS CSV LOCATION 'x/'", true).unwrap(),
            Statement::Fed {
                sql: "CREATE FEDERATED TABLE t STORED AS CSV LOCATION 'x/'".into(),
                kind: FedKind::Command("CREATE TABLE".into())
            }
        );
    }

    #[test]
    fn timeouts() {
        assert_eq!(
            parse_timeout("150").unwrap(),
            Some(Duration::from_millis(150))
        );
        assert_eq!(
            parse_timeout("1min").unwrap(),
            Some(Duration::from_secs(60))
        );
        assert_eq!(parse_timeout("0").unwrap(), None);
        assert!(parse_timeout("soon").is_err());
    }
}
