//! Turning lines of input into commands and statements.
//!
//! The REPL reads a line at a time, and so does the script driver, so both
//! go through one [`LineBuffer`]: a line that starts with `\` is a
//! backslash command, complete on its own line — also while a statement is
//! pending, as in psql, unless that statement is inside a string literal or
//! comment; any other line is SQL and is added to the pending text until a
//! `;` (outside literals and comments, see [`crate::frontend::split`])
//! completes one or more statements.
//!
//! A command ends the SQL typed before it as psql's do: `\g` runs the
//! pending statement, `\r` forgets it, and any other command (`\d`, `\q`,
//! ...) runs while the statement stays pending for a later `;`.

use crate::error::Result;
use crate::frontend::repl::command::Command;
use crate::frontend::split;

/// One thing to run: a backslash command or a SQL statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A backslash command.
    Command(Command),
    /// One SQL statement, without its `;`.
    Statement(String),
}

/// SQL typed so far that no `;` has completed yet.
#[derive(Debug, Default)]
pub struct LineBuffer {
    pending: String,
    /// Whether `pending` ends inside a literal, quoted identifier or
    /// comment, or cannot be read: a line added to it is then read with
    /// all of it, not on its own.
    open: bool,
}

impl LineBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a statement is partly typed, so the REPL shows its
    /// continuation prompt.
    pub fn is_pending(&self) -> bool {
        !split::is_blank(&self.pending)
    }

    /// Adds one line; returns what it completed, in order. An item is an
    /// error where a backslash command is malformed, or where the SQL cannot
    /// be read whatever follows (the pending text is then dropped).
    pub fn push_line(&mut self, line: &str) -> Vec<Result<Input>> {
        let trimmed = line.trim();
        if trimmed.starts_with('\\') && self.takes_command() {
            if !self.is_pending() {
                self.clear();
            }
            return match trimmed.parse::<Command>() {
                Ok(Command::Go) => {
                    let inputs = self.finish();
                    if inputs.is_empty() {
                        vec![Err(crate::error::FedError::Syntax(
                            "\\g runs the statement typed so far, and none is".into(),
                        ))]
                    } else {
                        inputs
                    }
                }
                Ok(Command::Reset) => {
                    self.clear();
                    vec![Ok(Input::Command(Command::Reset))]
                }
                command => vec![command.map(Input::Command)],
            };
        }
        if !self.is_pending() {
            // psql's words for leaving, at an empty prompt.
            let word = trimmed.trim_end_matches(';').trim_end();
            if word.eq_ignore_ascii_case("quit") || word.eq_ignore_ascii_case("exit") {
                self.clear();
                return vec![Ok(Input::Command(Command::Quit))];
            }
        }
        // A line without `;` after text that is closed completes nothing:
        // when it reads to its end on its own, it is only added (a long
        // statement, a line at a time, is not read again at every line).
        if !self.open
            && !line.contains(';')
            && let Some(blank) = split::reads_to_end(line)
        {
            if !(blank && self.pending.is_empty()) {
                self.pending.push_str(line);
                self.pending.push('\n');
            }
            return Vec::new();
        }
        self.pending.push_str(line);
        self.pending.push('\n');
        let (complete, rest) = split::take_complete(&self.pending);
        let mut inputs: Vec<Result<Input>> = complete
            .into_iter()
            .map(|sql| Ok(Input::Statement(sql)))
            .collect();
        match rest {
            Ok(rest) => {
                self.open = split::reads_to_end(&rest).is_none();
                self.pending = rest;
            }
            Err(error) => {
                self.clear();
                inputs.push(Err(error));
            }
        }
        inputs
    }

    /// Whether a `\\` line is a command: no statement pending, or one
    /// that is not inside an open literal or comment.
    fn takes_command(&self) -> bool {
        !self.is_pending() || split::split_statements(&self.pending).is_ok()
    }

    /// At the end of the input: the statement left without a `;`, if any, or
    /// why it cannot be read (an unterminated string literal, say).
    pub fn finish(&mut self) -> Vec<Result<Input>> {
        let rest = std::mem::take(&mut self.pending);
        self.open = false;
        match split::split_statements(&rest) {
            Ok(statements) => statements
                .into_iter()
                .map(|sql| Ok(Input::Statement(sql)))
                .collect(),
            Err(error) => vec![Err(error)],
        }
    }

    /// Forgets the pending text (Ctrl-C at the prompt).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.open = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statement(sql: &str) -> Input {
        Input::Statement(sql.to_string())
    }

    fn ok(inputs: Vec<Result<Input>>) -> Vec<Input> {
        inputs.into_iter().map(|input| input.unwrap()).collect()
    }

    #[test]
    fn statements_complete_at_semicolons_across_lines() {
        let mut buffer = LineBuffer::new();
        assert_eq!(ok(buffer.push_line("SELECT region,")), []);
        assert!(buffer.is_pending());
        assert_eq!(ok(buffer.push_line("  count(*) FROM clinic")), []);
        assert_eq!(
            ok(buffer.push_line("GROUP BY region; SELECT 1; SELECT")),
            [
                statement("SELECT region,\n  count(*) FROM clinic\nGROUP BY region"),
                statement("SELECT 1")
            ]
        );
        assert_eq!(ok(buffer.push_line("2")), []);
        assert_eq!(ok(buffer.finish()), [statement("SELECT\n2")]);
        assert!(!buffer.is_pending());
    }

    #[test]
    fn commands_complete_on_their_line() {
        let mut buffer = LineBuffer::new();
        assert_eq!(
            ok(buffer.push_line("  \\d clinic")),
            [Input::Command(Command::DescribeTable("clinic".into()))]
        );
        assert_eq!(
            ok(buffer.push_line("exit")),
            [Input::Command(Command::Quit)]
        );
        let bad = buffer.push_line("\\nope");
        assert!(matches!(bad.as_slice(), [Err(_)]), "{bad:?}");
    }

    #[test]
    fn a_backslash_inside_a_pending_statement_is_sql() {
        let mut buffer = LineBuffer::new();
        assert_eq!(ok(buffer.push_line("SELECT 'a")), []);
        assert_eq!(
            ok(buffer.push_line("\\d';")),
            [statement("SELECT 'a\n\\d'")]
        );
    }

    #[test]
    fn backslash_commands_end_a_pending_statement_as_in_psql() {
        let mut buffer = LineBuffer::new();
        assert_eq!(ok(buffer.push_line("SELECT count(*)")), []);
        // Another command runs; the statement stays pending.
        assert_eq!(
            ok(buffer.push_line("\\d")),
            [Input::Command(Command::ListTables)]
        );
        assert!(buffer.is_pending());
        assert_eq!(ok(buffer.push_line("FROM clinic")), []);
        assert_eq!(
            ok(buffer.push_line("\\g")),
            [statement("SELECT count(*)\nFROM clinic")]
        );
        assert!(!buffer.is_pending());
        assert_eq!(ok(buffer.push_line("SELECT oops")), []);
        assert_eq!(
            ok(buffer.push_line("\\r")),
            [Input::Command(Command::Reset)]
        );
        assert!(!buffer.is_pending());
        assert_eq!(ok(buffer.push_line("SELECT 1")), []);
        assert_eq!(ok(buffer.push_line("\\q")), [Input::Command(Command::Quit)]);
        assert!(matches!(
            LineBuffer::new().push_line("\\g").as_slice(),
            [Err(_)]
        ));
    }

    #[test]
    fn comments_alone_leave_nothing_pending() {
        let mut buffer = LineBuffer::new();
        assert_eq!(ok(buffer.push_line("-- a note")), []);
        assert!(!buffer.is_pending());
        assert_eq!(ok(buffer.push_line("\\q")), [Input::Command(Command::Quit)]);
        assert_eq!(ok(buffer.finish()), []);
    }

    #[test]
    fn unterminated_literal_at_the_end_is_an_error() {
        let mut buffer = LineBuffer::new();
        assert_eq!(ok(buffer.push_line("SELECT 'abc")), []);
        assert!(buffer.is_pending());
        assert!(matches!(buffer.finish().as_slice(), [Err(_)]));
    }

    #[test]
    fn statements_typed_a_line_at_a_time_are_those_of_the_whole_text() {
        // Lines read on their own and lines read with what is pending: `;`
        // in a literal, a literal and a comment over several lines.
        let text = "CREATE FEDERATED TABLE t STORED AS CSV CLIENTS (\n\
                    'a' = 'x.csv', -- one\n\
                    'b' = 'y;z.csv',\n\
                    /* two\n\
                    lines */ 'c' = 'w\n\
                    v.csv'\n\
                    );\n\
                    SELECT 1\n\
                    ;";
        let mut buffer = LineBuffer::new();
        let mut typed = Vec::new();
        for line in text.lines() {
            typed.extend(ok(buffer.push_line(line)));
        }
        typed.extend(ok(buffer.finish()));
        let whole: Vec<Input> = split::split_statements(text)
            .unwrap()
            .into_iter()
            .map(Input::Statement)
            .collect();
        assert_eq!(typed.len(), 2);
        assert_eq!(typed, whole);
    }

    #[test]
    fn sql_no_input_can_fix_is_reported_at_once() {
        let mut buffer = LineBuffer::new();
        let inputs = buffer.push_line("SELECT 1; SELECT ._x; SELECT 3;");
        assert!(matches!(inputs.as_slice(), [Ok(_), Err(_)]), "{inputs:?}");
        assert!(!buffer.is_pending());
    }
}
