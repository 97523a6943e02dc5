//! The REPL's backslash commands.
//!
//! A line that starts with `\` (outside a string literal or comment) is a
//! command: it completes on its own line, without `;`, and ends the SQL
//! typed before it as psql does (`\g` runs that statement, `\r` forgets
//! it, any other command leaves it pending). [`Command`] parses such
//! a line; [`COMMANDS`] is the one table of names and descriptions, which
//! `\?` prints as a result through the same printer as a query's answer.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use datafusion::arrow::array::StringArray;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{FedError, Result};
use crate::frontend::print::OutputFormat;

/// One backslash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `\?`: list the commands.
    Help,
    /// `\q`: leave the session.
    Quit,
    /// `\d`: list the tables.
    ListTables,
    /// `\d NAME`: the schema of one table.
    DescribeTable(String),
    /// `\dt [PATTERN]`: the tables whose names match PATTERN (`*` and `?`
    /// as in psql), all without one.
    Tables(Option<String>),
    /// `\h [NAME]`: the documentation of function NAME; without NAME, the
    /// functions fedsql adds.
    Function(Option<String>),
    /// `\clients NAME`: the clients of a federated table.
    Clients(String),
    /// `\timing [on|off]`: toggle (or set) the row-count and elapsed-time line.
    Timing(Option<bool>),
    /// `\format [FORMAT]`: show the output format, or set it.
    Format(Option<OutputFormat>),
    /// `\digits [N]`: show, or set, the significant digits of floats in
    /// the table format (0: all); the same as `SET fedsql.display_digits = N`.
    Digits(Option<usize>),
    /// `\i FILE`: run the statements and commands in a file.
    Include(PathBuf),
    /// `\g`: run the statement typed so far (without its `;`).
    Go,
    /// `\r`: forget the statement typed so far.
    Reset,
    /// `\chart [Y [X]]`: draw the last result's column Y against X.
    Chart {
        y: Option<String>,
        x: Option<String>,
    },
}

/// Usage and description of every command, in the order `\?` lists them.
pub const COMMANDS: &[(&str, &str)] = &[
    ("\\?", "list these commands"),
    ("\\q", "quit (Ctrl-D also quits)"),
    (
        "\\d",
        "list tables: name, kind (federated/shared), clients, columns",
    ),
    (
        "\\d NAME",
        "describe table NAME: its columns, types and nullability",
    ),
    (
        "\\dt [PATTERN]",
        "list tables whose names match PATTERN (* and ? wildcards), all without one",
    ),
    ("\\clients NAME", "list the clients of federated table NAME"),
    (
        "\\h [NAME]",
        "show the documentation of function NAME; without NAME, list the functions fedsql adds",
    ),
    (
        "\\timing [on|off]",
        "toggle the row-count and elapsed-time line after each result",
    ),
    (
        "\\format [FORMAT]",
        "show the output format, or set it: table, csv, json, ndjson",
    ),
    (
        "\\digits [N]",
        "show, or set, the significant digits of floats in tables (0: all; as SET fedsql.display_digits = N)",
    ),
    ("\\i FILE", "run the SQL statements and commands in FILE"),
    ("\\g", "run the statement typed so far, without its ;"),
    ("\\r", "forget the statement typed so far"),
    (
        "\\chart [Y [X]]",
        "draw the last result's column Y against X (default: loss by round, e.g. after fedsgd_history; bars after hist)",
    ),
];

impl Command {
    /// `\?` as a result: one row per command.
    pub fn help_batch() -> Result<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("command", DataType::Utf8, false),
            Field::new("description", DataType::Utf8, false),
        ]));
        Ok(RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    COMMANDS.iter().map(|(name, _)| *name),
                )),
                Arc::new(StringArray::from_iter_values(
                    COMMANDS.iter().map(|(_, about)| *about),
                )),
            ],
        )?)
    }
}

impl FromStr for Command {
    type Err = FedError;

    /// Parses one command line, e.g. `\d clinic`. A trailing `;` is ignored,
    /// as psql does.
    fn from_str(line: &str) -> Result<Self> {
        let line = line.trim().trim_end_matches(';').trim_end();
        let Some(body) = line.strip_prefix('\\') else {
            return Err(FedError::Syntax(format!(
                "`{line}` is not a command: commands start with `\\` (\\? lists them)"
            )));
        };
        let (name, arg) = match body.split_once(char::is_whitespace) {
            Some((name, arg)) => (name, Some(arg.trim()).filter(|a| !a.is_empty())),
            None => (body, None),
        };
        let command = match (name, arg) {
            ("?" | "help", None) => Command::Help,
            ("q" | "quit", None) => Command::Quit,
            ("d", None) => Command::ListTables,
            ("d", Some(table)) => Command::DescribeTable(unquote(table)),
            ("dt", pattern) => Command::Tables(pattern.map(unquote)),
            ("digits", None) => Command::Digits(None),
            ("digits", Some(n)) => Command::Digits(Some(n.parse().map_err(|_| {
                FedError::Syntax(format!(
                    "\\digits takes a number of significant digits (0 for all), not `{n}`"
                ))
            })?)),
            ("h" | "help", Some(name)) => Command::Function(Some(unquote(name))),
            ("h", None) => Command::Function(None),
            ("g", None) => Command::Go,
            ("r", None) => Command::Reset,
            ("clients", Some(table)) => Command::Clients(unquote(table)),
            ("clients", None) => return Err(needs("\\clients NAME", "a table name")),
            ("timing", None) => Command::Timing(None),
            ("timing", Some(setting)) => Command::Timing(Some(on_off(setting)?)),
            ("format", None) => Command::Format(None),
            ("format", Some(format)) => Command::Format(Some(format.parse()?)),
            ("i", Some(file)) => Command::Include(PathBuf::from(unquote(file))),
            ("i", None) => return Err(needs("\\i FILE", "a file name")),
            ("chart", arg) => {
                let mut words = arg.unwrap_or("").split_whitespace().map(unquote);
                let (y, x) = (words.next(), words.next());
                if let Some(extra) = words.next() {
                    return Err(FedError::Syntax(format!(
                        "\\chart takes at most two column names (Y, then X), not `{extra}`"
                    )));
                }
                Command::Chart { y, x }
            }
            ("?" | "q" | "quit" | "g" | "r", Some(arg)) => {
                return Err(FedError::Syntax(format!(
                    "\\{name} takes no argument `{arg}` (\\? lists the commands)"
                )));
            }
            _ => {
                return Err(FedError::Syntax(format!(
                    "unknown command `\\{name}`: \\? lists the commands"
                )));
            }
        };
        Ok(command)
    }
}

fn needs(usage: &str, what: &str) -> FedError {
    FedError::Syntax(format!(
        "{} needs {what}: {usage}",
        usage.split(' ').next().unwrap_or(usage)
    ))
}

fn on_off(setting: &str) -> Result<bool> {
    match setting.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(FedError::Syntax(format!(
            "\\timing takes on or off, not `{setting}`"
        ))),
    }
}

/// `"my table"` or `'my table'` names `my table`.
fn unquote(arg: &str) -> String {
    for quote in ['"', '\''] {
        if let Some(inner) = arg.strip_prefix(quote).and_then(|a| a.strip_suffix(quote)) {
            return inner.to_string();
        }
    }
    arg.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Command {
        line.parse().unwrap()
    }

    #[test]
    fn parses_every_command() {
        assert_eq!(parse("\\?"), Command::Help);
        assert_eq!(parse("\\q"), Command::Quit);
        assert_eq!(parse("  \\d  "), Command::ListTables);
        assert_eq!(
            parse("\\d clinic;"),
            Command::DescribeTable("clinic".into())
        );
        assert_eq!(
            parse("\\clients \"My Table\""),
            Command::Clients("My Table".into())
        );
        assert_eq!(parse("\\dt"), Command::Tables(None));
        assert_eq!(parse("\\dt cl*"), Command::Tables(Some("cl*".into())));
        assert_eq!(parse("\\digits 4"), Command::Digits(Some(4)));
        assert_eq!(parse("\\digits"), Command::Digits(None));
        assert_eq!(parse("\\g"), Command::Go);
        assert_eq!(parse("\\h"), Command::Function(None));
        assert_eq!(parse("\\h glm"), Command::Function(Some("glm".into())));
        assert_eq!(parse("\\r"), Command::Reset);
        assert_eq!(parse("\\timing"), Command::Timing(None));
        assert_eq!(parse("\\timing OFF"), Command::Timing(Some(false)));
        assert_eq!(parse("\\format"), Command::Format(None));
        assert_eq!(
            parse("\\format csv"),
            Command::Format(Some(OutputFormat::Csv))
        );
        assert_eq!(parse("\\chart"), Command::Chart { y: None, x: None });
        assert_eq!(
            parse("\\chart loss round"),
            Command::Chart {
                y: Some("loss".into()),
                x: Some("round".into())
            }
        );
        assert_eq!(
            parse("\\i 'queries/a b.sql'"),
            Command::Include("queries/a b.sql".into())
        );
    }

    #[test]
    fn errors_say_what_to_do() {
        let unknown = "\\frobnicate".parse::<Command>().unwrap_err().to_string();
        assert!(
            unknown.contains("unknown command `\\frobnicate`") && unknown.contains("\\?"),
            "{unknown}"
        );
        let missing = "\\clients".parse::<Command>().unwrap_err().to_string();
        assert!(missing.contains("\\clients NAME"), "{missing}");
        let format = "\\format xml".parse::<Command>().unwrap_err().to_string();
        assert!(format.contains("csv"), "{format}");
        assert!("\\q now".parse::<Command>().is_err());
        assert!("\\digits many".parse::<Command>().is_err());
    }

    #[test]
    fn help_lists_every_command_once() {
        let batch = Command::help_batch().unwrap();
        assert_eq!(batch.num_rows(), COMMANDS.len());
        // Every listed usage parses (with a placeholder argument).
        for (usage, _) in COMMANDS {
            let line = usage
                .replace("NAME", "t")
                .replace("FILE", "f.sql")
                .replace("[on|off]", "on")
                .replace("[FORMAT]", "csv")
                .replace("[PATTERN]", "c*")
                .replace("[N]", "4")
                .replace("[Y [X]]", "loss round");
            assert!(line.parse::<Command>().is_ok(), "{line}");
        }
    }
}
