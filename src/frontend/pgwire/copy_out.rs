//! `COPY (query) TO STDOUT` and `COPY table TO STDOUT`: a query's rows sent
//! to the client in PostgreSQL's COPY text or CSV format (the `CopyOut`
//! response), which is what psql's `\copy (…) TO 'file'` and the drivers'
//! copy APIs send.
//!
//! Such a COPY writes nothing at the server: its rows go to the client
//! as a query's would, so it needs no `--allow-ddl`; the query runs through
//! [`FedContext::sql`](crate::FedContext::sql) like any other (exposure
//! check, split, the gate), and only the encoding of its answer differs.
//! `COPY … TO 'file'` (a file on the server) is left to that path, and the
//! gate refuses it without `--allow-ddl`.
//!
//! Each value is written as PostgreSQL's text output of its type (the
//! encoding of [`super::encode`]); the text format escapes backslash, tab,
//! newline and carriage return and writes NULL as `\N`; the CSV format
//! quotes a value holding the delimiter, the quote, a line break, or
//! nothing (an empty string), and writes NULL as nothing. Each row is one
//! `CopyData` message, as PostgreSQL sends them.

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget,
    Statement as SqlStatement,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use pgwire::api::portal::Format;
use pgwire::error::PgWireResult;
use pgwire::messages::copy::CopyData;

use super::encode;
use crate::error::{FedError, Result};

/// How a `COPY … TO STDOUT` writes its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CopyFormat {
    /// CSV (else PostgreSQL's text format).
    pub csv: bool,
    pub delimiter: char,
    /// What NULL is written as.
    pub null: String,
    /// A first line of column names (CSV only, as PostgreSQL).
    pub header: bool,
    pub quote: char,
    pub escape: char,
}

impl CopyFormat {
    fn text() -> Self {
        Self {
            csv: false,
            delimiter: '\t',
            null: "\\N".into(),
            header: false,
            quote: '"',
            escape: '"',
        }
    }

    fn into_csv(mut self) -> Self {
        if !self.csv {
            self.csv = true;
            if self.delimiter == '\t' {
                self.delimiter = ',';
            }
            if self.null == "\\N" {
                self.null = String::new();
            }
        }
        self
    }
}

/// A `COPY … TO STDOUT`: the query whose rows it sends, and their format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CopyOut {
    pub query: String,
    pub format: CopyFormat,
}

/// Reads `sql` as a `COPY (query) TO STDOUT` or `COPY table [(columns)] TO
/// STDOUT` with its options; `None` for any other statement (a COPY to or
/// from a file, or that does not parse, is left to the engine).
pub(crate) fn read(sql: &str) -> Option<Result<CopyOut>> {
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()?;
    let [
        SqlStatement::Copy {
            source,
            to: true,
            target: CopyTarget::Stdout,
            options,
            legacy_options,
            ..
        },
    ] = statements.as_slice()
    else {
        return None;
    };
    let query = match source {
        CopySource::Query(query) => query.to_string(),
        CopySource::Table {
            table_name,
            columns,
        } => {
            let columns = if columns.is_empty() {
                "*".to_string()
            } else {
                columns
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!("SELECT {columns} FROM {table_name}")
        }
    };
    Some(format_of(options, legacy_options).map(|format| CopyOut { query, format }))
}

fn unsupported(what: &str) -> FedError {
    FedError::InvalidArgument(format!(
        "COPY … TO STDOUT: {what} is not supported; use FORMAT text or csv, with DELIMITER, NULL, HEADER, QUOTE and ESCAPE"
    ))
}

fn format_of(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> Result<CopyFormat> {
    let mut format = CopyFormat::text();
    // FORMAT first: the other options' defaults depend on it.
    for option in options {
        if let CopyOption::Format(name) = option {
            match name.value.to_ascii_lowercase().as_str() {
                "csv" => format = format.into_csv(),
                "text" => {}
                other => return Err(unsupported(&format!("FORMAT {other}"))),
            }
        }
    }
    if legacy.iter().any(|o| matches!(o, CopyLegacyOption::Csv(_))) {
        format = format.into_csv();
    }
    for option in options {
        match option {
            CopyOption::Format(_) | CopyOption::Encoding(_) | CopyOption::Freeze(_) => {}
            CopyOption::Delimiter(c) => format.delimiter = *c,
            CopyOption::Null(s) => format.null = s.clone(),
            CopyOption::Header(h) => format.header = *h,
            CopyOption::Quote(c) => format.quote = *c,
            CopyOption::Escape(c) => format.escape = *c,
            other => return Err(unsupported(&other.to_string())),
        }
    }
    for option in legacy {
        match option {
            CopyLegacyOption::Csv(csv) => {
                for option in csv {
                    match option {
                        CopyLegacyCsvOption::Header => format.header = true,
                        CopyLegacyCsvOption::Quote(c) => format.quote = *c,
                        CopyLegacyCsvOption::Escape(c) => format.escape = *c,
                        other => return Err(unsupported(&other.to_string())),
                    }
                }
            }
            CopyLegacyOption::Delimiter(c) => format.delimiter = *c,
            CopyLegacyOption::Null(s) => format.null = s.clone(),
            CopyLegacyOption::Header => format.header = true,
            CopyLegacyOption::Binary => return Err(unsupported("BINARY")),
            other => return Err(unsupported(&other.to_string())),
        }
    }
    if format.header && !format.csv {
        return Err(FedError::InvalidArgument(
            "COPY … TO STDOUT: HEADER is available only in CSV mode (as in PostgreSQL)".into(),
        ));
    }
    Ok(format)
}

/// The rows of `batches` as COPY data, one message per row (the header
/// line, if any, travels with the first row so that the command tag
/// counts rows as PostgreSQL does).
pub(crate) fn encode_rows(
    format: &CopyFormat,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> PgWireResult<Vec<CopyData>> {
    // The batches' own schema: a plan's may differ in a column's width
    // (a UNION's Int32 planned, Int64 run).
    let schema = batches
        .first()
        .map(|b| b.schema())
        .unwrap_or_else(|| Arc::clone(schema));
    let fields = Arc::new(encode::row_description(&schema, &Format::UnifiedText)?);
    let rows = encode::encode_batches(&fields, &schema, batches)?;
    let mut header = format.header.then(|| {
        let names: Vec<Option<&[u8]>> = schema
            .fields()
            .iter()
            .map(|f| Some(f.name().as_bytes()))
            .collect();
        line(format, &names)
    });
    let mut out = Vec::with_capacity(rows.len() + 1);
    for row in rows {
        let values = fields_of(&row.data);
        let mut text = header.take().unwrap_or_default();
        text.extend_from_slice(&line(format, &values));
        out.push(CopyData::new(Bytes::from(text)));
    }
    if let Some(header) = header {
        out.push(CopyData::new(Bytes::from(header)));
    }
    Ok(out)
}

/// The values of a data row: each a 4-byte length (-1 for NULL) and bytes.
fn fields_of(data: &[u8]) -> Vec<Option<&[u8]>> {
    let mut values = Vec::new();
    let mut at = 0;
    while at + 4 <= data.len() {
        let length = i32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        at += 4;
        if length < 0 {
            values.push(None);
        } else {
            let end = (at + length as usize).min(data.len());
            values.push(Some(&data[at..end]));
            at = end;
        }
    }
    values
}

/// One line of COPY output, ending in a newline.
fn line(format: &CopyFormat, values: &[Option<&[u8]>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut delimiter = [0u8; 4];
    let delimiter = format.delimiter.encode_utf8(&mut delimiter).as_bytes();
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(delimiter);
        }
        match value {
            None => out.extend_from_slice(format.null.as_bytes()),
            Some(value) if format.csv => csv_value(format, value, &mut out),
            Some(value) => text_value(format, value, &mut out),
        }
    }
    out.push(b'\n');
    out
}

/// A value in PostgreSQL's text format: backslash, line breaks, tab and
/// the delimiter escaped with a backslash.
fn text_value(format: &CopyFormat, value: &[u8], out: &mut Vec<u8>) {
    let delimiter = u8::try_from(format.delimiter).ok();
    for &byte in value {
        match byte {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            other if Some(other) == delimiter => {
                out.push(b'\\');
                out.push(other);
            }
            other => out.push(other),
        }
    }
}

/// A value in CSV: quoted when it holds the delimiter, the quote, a line
/// break or the NULL text, or is empty; a quote inside doubled (or
/// preceded by the escape).
fn csv_value(format: &CopyFormat, value: &[u8], out: &mut Vec<u8>) {
    let text = String::from_utf8_lossy(value);
    let needs_quotes = text.is_empty()
        || text == format.null
        || text.contains([format.delimiter, format.quote, '\n', '\r']);
    if !needs_quotes {
        out.extend_from_slice(value);
        return;
    }
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push(format.quote);
    for c in text.chars() {
        if c == format.quote || c == format.escape {
            quoted.push(format.escape);
        }
        quoted.push(c);
    }
    quoted.push(format.quote);
    out.extend_from_slice(quoted.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_psql_copy_forms() {
        let copy = read("COPY (SELECT a, b FROM t WHERE a > 1) TO STDOUT CSV HEADER")
            .unwrap()
            .unwrap();
        assert!(copy.format.csv && copy.format.header);
        assert_eq!(copy.format.delimiter, ',');
        assert!(
            copy.query.starts_with("SELECT a, b FROM t"),
            "{}",
            copy.query
        );
        let copy = read("COPY t (a, b) TO STDOUT WITH (FORMAT csv, DELIMITER ';', NULL 'NA')")
            .unwrap()
            .unwrap();
        assert_eq!(copy.query, "SELECT a, b FROM t");
        assert_eq!(
            (copy.format.delimiter, copy.format.null.as_str()),
            (';', "NA")
        );
        let copy = read("copy (select 1) to stdout").unwrap().unwrap();
        assert_eq!(copy.format, CopyFormat::text());
        assert!(read("COPY (SELECT 1) TO '/tmp/x.csv'").is_none());
        assert!(read("SELECT 1").is_none());
        assert!(read("COPY (SELECT 1) TO STDOUT BINARY").unwrap().is_err());
    }

    #[test]
    fn lines_are_written_as_postgresql_writes_them() {
        let text = CopyFormat::text();
        let values = [Some(&b"a\tb\\c"[..]), None, Some(&b""[..])];
        assert_eq!(line(&text, &values), b"a\\tb\\\\c\t\\N\t\n");
        let csv = CopyFormat::text().into_csv();
        let values = [
            Some(&b"x,y"[..]),
            None,
            Some(&b""[..]),
            Some(&b"say \"hi\""[..]),
        ];
        assert_eq!(line(&csv, &values), b"\"x,y\",,\"\",\"say \"\"hi\"\"\"\n");
    }
}
