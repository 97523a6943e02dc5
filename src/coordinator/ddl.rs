//! `CREATE FEDERATED TABLE`: the statement that registers a federated table.
//!
//! ```sql
//! CREATE FEDERATED TABLE [IF NOT EXISTS] name [(col TYPE [NOT NULL], ...)]
//!     [STORED AS CSV | PARQUET]
//!     { LOCATION 'folder/'
//!     | CLIENTS ('client_a' = 'path/a.csv', 'client_b' = 'path/b/', ...) }
//! ```
//!
//! With `LOCATION`, every file directly in the folder is one client named by
//! its file stem, and every subfolder is one client (named by the folder)
//! holding its files. With `CLIENTS`, each client is named and its path is a
//! file or a folder; the format comes from the extension (or `STORED AS`), so
//! one table may mix CSV and Parquet clients. The optional column list
//! declares the schema (as `CREATE EXTERNAL TABLE` does) instead of
//! inferring it.

use std::path::PathBuf;

use datafusion::sql::sqlparser::ast::ColumnDef;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::error::{FedError, Result};
use crate::site::files::FileFormat;

/// Where a federated table's clients are.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientList {
    /// A folder whose files / subfolders are the clients.
    Location(PathBuf),
    /// Named clients, each with a file or folder path.
    Named(Vec<(String, PathBuf)>),
}

/// A parsed `CREATE FEDERATED TABLE` statement.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateFederatedTable {
    pub name: String,
    pub if_not_exists: bool,
    pub or_replace: bool,
    /// Declared columns, as SQL column definitions (empty: infer).
    pub columns: Vec<ColumnDef>,
    pub format: Option<FileFormat>,
    pub clients: ClientList,
    /// `OPTIONS ('key' 'value', ...)`: how to reach remote clients (see
    /// [`crate::coordinator::worker_url`]).
    pub options: Vec<(String, String)>,
}

/// Parses a `CREATE FEDERATED TABLE` statement.
pub(crate) fn parse_create_federated(sql: &str) -> Result<CreateFederatedTable> {
    parse(sql).map_err(|e| {
        let e = e.to_string();
        let e = e.strip_prefix("sql parser error: ").unwrap_or(&e);
        FedError::Syntax(format!(
            "{e}\nusage: CREATE FEDERATED TABLE name [(col TYPE, ...)] [STORED AS CSV|PARQUET] \
             {{ LOCATION 'folder/' | CLIENTS ('client' = 'path' | 'grpc://host:port[/table]', ...) }} \
             [OPTIONS ('token_file' 'file', 'timeout' '30s', 'ca_cert' 'ca.pem')]"
        ))
    })
}

fn parse(sql: &str) -> Result<CreateFederatedTable, ParserError> {
    let dialect = GenericDialect {};
    let mut p = Parser::new(&dialect).try_with_sql(sql)?;
    p.expect_keyword_is(Keyword::CREATE)?;
    let or_replace = p.parse_keywords(&[Keyword::OR, Keyword::REPLACE]);
    expect_word(&mut p, "FEDERATED")?;
    expect_word(&mut p, "TABLE")?;
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = p.parse_object_name(false)?.to_string();
    let (columns, _constraints) = p.parse_columns()?;

    let mut format = None;
    let mut clients = None;
    let mut options = Vec::new();
    loop {
        if p.parse_keywords(&[Keyword::STORED, Keyword::AS]) {
            let ident = p.parse_identifier()?;
            format = Some(
                FileFormat::parse(&ident.value)
                    .map_err(|e| ParserError::ParserError(e.to_string()))?,
            );
        } else if p.parse_keyword(Keyword::LOCATION) {
            set_once(
                &mut clients,
                ClientList::Location(PathBuf::from(p.parse_literal_string()?)),
            )?;
        } else if peek_word(&p, "CLIENTS") {
            p.next_token();
            set_once(
                &mut clients,
                ClientList::Named(parse_named_clients(&mut p)?),
            )?;
        } else if p.parse_keyword(Keyword::OPTIONS) {
            if !options.is_empty() {
                return Err(ParserError::ParserError("give OPTIONS once".into()));
            }
            options = parse_options(&mut p)?;
        } else {
            break;
        }
    }
    while p.consume_token(&Token::SemiColon) {}
    let next = p.peek_token();
    if next.token != Token::EOF {
        return Err(ParserError::ParserError(format!(
            "unexpected `{}` at {}: expected STORED AS, LOCATION, CLIENTS or OPTIONS",
            next.token, next.span.start
        )));
    }
    let clients = clients.ok_or_else(|| {
        ParserError::ParserError(
            "a federated table needs LOCATION 'folder/' or CLIENTS (...)".into(),
        )
    })?;
    Ok(CreateFederatedTable {
        name,
        if_not_exists,
        or_replace,
        columns,
        format,
        clients,
        options,
    })
}

/// `('key' 'value', ...)`, an `=` between key and value allowed.
fn parse_options(p: &mut Parser) -> Result<Vec<(String, String)>, ParserError> {
    p.expect_token(&Token::LParen)?;
    let mut options: Vec<(String, String)> = Vec::new();
    loop {
        let key = match p.next_token().token {
            Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => s,
            Token::Word(w) => w.value,
            other => {
                return Err(ParserError::ParserError(format!(
                    "expected an option name ('key' 'value'), found `{other}`"
                )));
            }
        };
        let _ = p.consume_token(&Token::Eq);
        let value = p.parse_literal_string()?;
        if options.iter().any(|(k, _)| k.eq_ignore_ascii_case(&key)) {
            return Err(ParserError::ParserError(format!(
                "option '{key}' is given twice"
            )));
        }
        options.push((key, value));
        if !p.consume_token(&Token::Comma) {
            break;
        }
    }
    p.expect_token(&Token::RParen)?;
    Ok(options)
}

fn parse_named_clients(p: &mut Parser) -> Result<Vec<(String, PathBuf)>, ParserError> {
    p.expect_token(&Token::LParen)?;
    let mut clients: Vec<(String, PathBuf)> = Vec::new();
    loop {
        let name = match p.next_token().token {
            Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => s,
            Token::Word(w) => w.value,
            other => {
                return Err(ParserError::ParserError(format!(
                    "expected a client name ('name' = 'path'), found `{other}`"
                )));
            }
        };
        p.expect_token(&Token::Eq)?;
        let path = p.parse_literal_string()?;
        if clients.iter().any(|(n, _)| *n == name) {
            return Err(ParserError::ParserError(format!(
                "client '{name}' is named twice"
            )));
        }
        clients.push((name, PathBuf::from(path)));
        if !p.consume_token(&Token::Comma) {
            break;
        }
    }
    p.expect_token(&Token::RParen)?;
    Ok(clients)
}

fn set_once(slot: &mut Option<ClientList>, value: ClientList) -> Result<(), ParserError> {
    if slot.is_some() {
        return Err(ParserError::ParserError(
            "give either LOCATION or CLIENTS, once".into(),
        ));
    }
    *slot = Some(value);
    Ok(())
}

fn peek_word(p: &Parser, word: &str) -> bool {
    matches!(&p.peek_token().token, Token::Word(w) if w.value.eq_ignore_ascii_case(word))
}

fn expect_word(p: &mut Parser, word: &str) -> Result<(), ParserError> {
    if peek_word(p, word) {
        p.next_token();
        Ok(())
    } else {
        let found = p.peek_token();
        let hint = crate::suggest::did_you_mean(&found.token.to_string(), &[word])
            .map(|w| format!(" (did you mean {w}?)"))
            .unwrap_or_default();
        Err(ParserError::ParserError(format!(
            "expected {word}, found `{}` at {}{hint}",
            found.token, found.span.start
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_form_with_columns() {
        let c = parse_create_federated(
            "CREATE FEDERATED TABLE t (c1 VARCHAR NOT NULL, c2 TINYINT, c9 INT UNSIGNED, c11 REAL) STORED AS CSV LOCATION 'dir/';",
        )
        .unwrap();
        assert_eq!(c.name, "t");
        assert_eq!(c.columns.len(), 4);
        assert_eq!(c.format, Some(FileFormat::Csv));
        assert_eq!(c.clients, ClientList::Location("dir/".into()));
    }

    #[test]
    fn clients_form() {
        let c = parse_create_federated(
            "create federated table if not exists v CLIENTS ('a' = 'x/a.csv', b = '/data/b.parquet')",
        )
        .unwrap();
        assert!(c.if_not_exists);
        assert_eq!(
            c.clients,
            ClientList::Named(vec![
                ("a".into(), "x/a.csv".into()),
                ("b".into(), "/data/b.parquet".into())
            ])
        );
    }

    #[test]
    fn remote_clients_with_options() {
        let c = parse_create_federated(
            "CREATE FEDERATED TABLE t CLIENTS ('a' = 'grpc://127.0.0.1:5/x', 'b' = 'b.csv') \
             OPTIONS ('token_file' 'tok', timeout = '5s', 'token_file.a' 'tok_a')",
        )
        .unwrap();
        assert_eq!(
            c.options,
            [
                ("token_file".to_string(), "tok".to_string()),
                ("timeout".to_string(), "5s".to_string()),
                ("token_file.a".to_string(), "tok_a".to_string())
            ]
        );
        let e = parse_create_federated(
            "CREATE FEDERATED TABLE t CLIENTS ('a' = 'x.csv') OPTIONS ('k' 'v', 'K' 'w')",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn errors_say_what_is_expected() {
        let e = parse_create_federated("CREATE FEDERATED TABLE t STORED AS CSV")
            .unwrap_err()
            .to_string();
        assert!(e.contains("LOCATION"), "{e}");
        let e = parse_create_federated("CREATE FEDERATED TABLE t STORED AS JSON LOCATION 'x'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("STORED AS CSV"), "{e}");
        let e = parse_create_federated("CREATE FEDERATED TABEL t LOCATION 'x'")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("expected TABLE, found `TABEL`") && e.contains("did you mean TABLE?"),
            "{e}"
        );
        let e = parse_create_federated("CREATE FEDERATED TABLE t LOCATION 'x' garbage")
            .unwrap_err()
            .to_string();
        assert!(e.contains("garbage"), "{e}");
    }
}
