//! Cutting a SQL script into statements.
//!
//! A script (a `-f` file, a `-c` argument, the lines typed at the REPL) holds
//! several statements separated by `;`. A semicolon inside a string literal,
//! a quoted identifier or a comment does not end a statement, so the script is
//! run through sqlparser's tokenizer rather than scanned by hand: every
//! [`Token::SemiColon`] it yields is a real terminator. Each statement is then
//! sliced out of the original text by the tokens' spans, so literals come back
//! byte for byte as written; comments before and after a statement are left
//! out, and statements that hold nothing but whitespace and comments are
//! dropped.
//!
//! [`split_statements`] cuts a whole script; [`take_complete`] is its
//! incremental form for the REPL, which must tell a finished statement from
//! one still being typed.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer, TokenizerError};

use crate::coordinator::fed_statement::Offsets;
use crate::error::{FedError, Result};

/// Splits a script into its statements, without the terminating `;`.
///
/// The last statement needs no `;`. Statements that hold only whitespace and
/// comments are dropped. A script that cannot be tokenized (an unterminated
/// string literal, quoted identifier or block comment) is a
/// [`FedError::Syntax`] naming the line and column.
pub fn split_statements(sql: &str) -> Result<Vec<String>> {
    let mut tokens = Vec::new();
    tokenize(sql, &mut tokens).map_err(syntax_error)?;
    let cuts = cut(sql, &tokens);
    let mut statements = cuts.statements;
    statements.extend(cuts.unterminated);
    Ok(statements)
}

/// Takes the statements a `;` has completed off the front of `sql`.
///
/// Returns the complete statements (as [`split_statements`] would) and what
/// follows the last terminating `;`: the statement still being typed
/// (possibly empty), or the error that no further input can fix. Text that
/// fails only because a string literal, quoted identifier or comment is
/// still open is pending, not an error: more input may close it.
pub fn take_complete(sql: &str) -> (Vec<String>, Result<String>) {
    let mut tokens = Vec::new();
    // On error `tokens` holds every token before the bad one, so each `;`
    // among them still ends a statement.
    let result = tokenize(sql, &mut tokens);
    let cuts = cut(sql, &tokens);
    let rest = match result {
        Ok(()) => Ok(cuts
            .unterminated
            .map(|_| sql[cuts.rest_start..].to_string())
            .unwrap_or_default()),
        Err(e) if is_open_at_end(&e) => Ok(sql[cuts.rest_start..].to_string()),
        Err(e) => Err(syntax_error(e)),
    };
    (cuts.statements, rest)
}

/// Whether `sql` holds no statement at all: only whitespace and comments.
///
/// Text that cannot be tokenized (an unterminated block comment, say) is not
/// blank.
pub fn is_blank(sql: &str) -> bool {
    // Text that starts with anything but a comment starts with a token.
    let start = sql.trim_start();
    if start.is_empty() {
        return true;
    }
    if !start.starts_with("--") && !start.starts_with("/*") {
        return false;
    }
    reads_to_end(sql) == Some(true)
}

/// Whether `sql` reads to its end: no literal, quoted identifier or
/// comment left open, nothing unreadable; and if so, whether it is blank.
pub fn reads_to_end(sql: &str) -> Option<bool> {
    let mut tokens = Vec::new();
    tokenize(sql, &mut tokens).ok()?;
    Some(
        tokens
            .iter()
            .all(|t| matches!(t.token, Token::Whitespace(_))),
    )
}

/// Whether the tokenizer failed only because the input ended inside a
/// literal, quoted identifier or comment (its messages say "Unterminated
/// ..." or "... EOF").
fn is_open_at_end(error: &TokenizerError) -> bool {
    error.message.starts_with("Unterminated") || error.message.contains("EOF")
}

fn syntax_error(error: TokenizerError) -> FedError {
    FedError::Syntax(format!("cannot read the SQL: {error}"))
}

fn tokenize(sql: &str, tokens: &mut Vec<TokenWithSpan>) -> std::result::Result<(), TokenizerError> {
    let dialect = GenericDialect {};
    Tokenizer::new(&dialect, sql)
        .with_unescape(false)
        .tokenize_with_location_into_buf(tokens)
}

/// A script cut at its semicolons.
struct Cuts {
    /// Statements ended by a `;`.
    statements: Vec<String>,
    /// The non-blank text after the last `;`, if any.
    unterminated: Option<String>,
    /// Byte offset just past the last `;` (0 if there is none).
    rest_start: usize,
}

fn cut(sql: &str, tokens: &[TokenWithSpan]) -> Cuts {
    let mut offsets = Offsets::new(sql);
    let mut statements = Vec::new();
    let mut rest_start = 0;
    // Byte range from the first to the end of the last non-blank token of
    // the statement being read.
    let mut current: Option<(usize, usize)> = None;
    for token in tokens {
        match token.token {
            Token::SemiColon => {
                if let Some((start, end)) = current.take() {
                    statements.push(sql[start..end].to_string());
                }
                rest_start = offsets.byte(token.span.end);
            }
            Token::Whitespace(_) | Token::EOF => {}
            _ => {
                let start = offsets.byte(token.span.start);
                let end = offsets.byte(token.span.end);
                current = Some(current.map_or((start, end), |(s, _)| (s, end)));
            }
        }
    }
    Cuts {
        statements,
        unterminated: current.map(|(start, end)| sql[start..end].to_string()),
        rest_start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(sql: &str) -> Vec<String> {
        split_statements(sql).unwrap()
    }

    #[test]
    fn splits_at_semicolons() {
        assert_eq!(split("SELECT 1; SELECT 2;"), ["SELECT 1", "SELECT 2"]);
        assert_eq!(split("SELECT 1;\nSELECT 2"), ["SELECT 1", "SELECT 2"]);
    }

    #[test]
    fn semicolons_in_literals_identifiers_and_comments_do_not_split() {
        let sql = "SELECT 'a;b', \"c;d\" FROM t -- e;f\nWHERE x = 'it''s;' /* g; h */;SELECT 2";
        assert_eq!(
            split(sql),
            [
                "SELECT 'a;b', \"c;d\" FROM t -- e;f\nWHERE x = 'it''s;'",
                "SELECT 2"
            ]
        );
    }

    #[test]
    fn keeps_text_byte_for_byte() {
        let sql = "SELECT 'héllo;wörld' AS \"ünï\", E'\\n' ,  1.5e3\n\tFROM   t";
        assert_eq!(split(sql), [sql]);
    }

    #[test]
    fn a_long_line_of_many_statements_keeps_every_one_whole() {
        // Locations are counted on along a line, across multi-byte text.
        let statements: Vec<String> = (0..1000)
            .map(|i| format!("SELECT 'ü{i}é', \"ñ{i}\" FROM t{i}"))
            .collect();
        let line = statements.join("; ");
        assert_eq!(split(&line), statements);
        let (complete, rest) = take(&format!("{line}; SELECT 'ö"));
        assert_eq!(complete, statements);
        assert_eq!(rest, " SELECT 'ö");
    }

    #[test]
    fn drops_empty_statements_and_surrounding_comments() {
        let sql = "-- header\n;;  ; /* nothing */ ;\n-- about q\nSELECT 1 -- trailing\n; -- end";
        assert_eq!(split(sql), ["SELECT 1"]);
        assert!(split("  -- only a comment\n").is_empty());
        assert!(split("").is_empty());
    }

    #[test]
    fn unterminated_literal_is_a_syntax_error() {
        let err = split_statements("SELECT 1; SELECT 'abc").unwrap_err();
        assert!(matches!(err, FedError::Syntax(_)), "{err}");
    }

    fn take(sql: &str) -> (Vec<String>, String) {
        let (done, rest) = take_complete(sql);
        (done, rest.unwrap())
    }

    #[test]
    fn take_complete_keeps_the_unfinished_statement() {
        assert_eq!(take("SELECT 1"), (vec![], "SELECT 1".to_string()));
        assert_eq!(
            take("SELECT 1;"),
            (vec!["SELECT 1".to_string()], String::new())
        );
        assert_eq!(
            take("SELECT 1; SELECT\n  2"),
            (vec!["SELECT 1".to_string()], " SELECT\n  2".to_string())
        );
        // Only a comment after the last `;`: nothing is pending.
        assert_eq!(
            take("SELECT 1; -- done\n"),
            (vec!["SELECT 1".to_string()], String::new())
        );
    }

    #[test]
    fn take_complete_waits_for_what_is_still_open() {
        let (done, rest) = take("SELECT 1; SELECT 'a;\n");
        assert_eq!(done, ["SELECT 1"]);
        assert_eq!(rest, " SELECT 'a;\n");
        let (done, rest) = take(&format!("{rest}b';"));
        assert_eq!(done, ["SELECT 'a;\nb'"]);
        assert_eq!(rest, "");
        for open in ["SELECT \"col;", "SELECT 1 /* note;", "SELECT $$a;"] {
            assert_eq!(take(open), (vec![], open.to_string()));
        }
    }

    #[test]
    fn take_complete_reports_what_more_input_cannot_fix() {
        let (done, rest) = take_complete("SELECT 1; SELECT ._x; SELECT 3;");
        assert_eq!(done, ["SELECT 1"]);
        let Err(FedError::Syntax(message)) = rest else {
            panic!("expected a syntax error, got {rest:?}");
        };
        assert!(message.contains("Unexpected character '_'"), "{message}");
    }

    #[test]
    fn blank_means_only_whitespace_and_comments() {
        assert!(is_blank(" \n-- x\n/* y */"));
        assert!(!is_blank("SELECT"));
        assert!(!is_blank("/* open"));
    }
}
