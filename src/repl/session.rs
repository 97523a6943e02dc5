//! A session: what one REPL (or one run of the CLI) remembers between
//! inputs — the context, the output format, whether to print timing — and
//! how it runs each command and statement.
//!
//! Errors follow [`ReplOptions::stop_on_error`]: an interactive session
//! prints `Error: ...` and goes on; a non-interactive one stops at the first
//! error and hands it back, like psql with `ON_ERROR_STOP`.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{ArrayRef, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::coordinator::context::{FedContext, TableInfo};
use crate::error::{FedError, Result};
use crate::print::{self, OutputFormat};
use crate::repl::command::Command;
use crate::repl::input::{Input, LineBuffer};

/// `\i` files may include others, but not without end.
const MAX_INCLUDE_DEPTH: usize = 16;

/// Settings of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplOptions {
    /// How results are printed (`\format`).
    pub format: OutputFormat,
    /// Print the row-count and elapsed-time line after each result (`\timing`).
    pub timing: bool,
    /// Stop at the first error and return it (non-interactive use), instead
    /// of printing `Error: ...` and going on.
    pub stop_on_error: bool,
    /// Long fits draw a progress line on stderr (interactive use); it is
    /// cleared before the result prints.
    pub progress: bool,
}

impl Default for ReplOptions {
    /// The interactive defaults: table format, timing on, go on after errors.
    fn default() -> Self {
        Self {
            format: OutputFormat::Table,
            timing: true,
            stop_on_error: false,
            progress: false,
        }
    }
}

/// What a session has run so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptSummary {
    /// SQL statements that succeeded.
    pub statements: usize,
    /// Backslash commands that succeeded.
    pub commands: usize,
    /// Commands and statements that failed.
    pub errors: usize,
    /// Whether `\q` ended the session.
    pub quit: bool,
}

/// Whether to read on after an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Read the next input.
    Continue,
    /// `\q`: end the session.
    Quit,
}

/// One REPL session over a [`FedContext`].
pub struct Session {
    ctx: FedContext,
    options: ReplOptions,
    summary: ScriptSummary,
    /// The last query result, for `\chart`.
    last: Option<(SchemaRef, Vec<RecordBatch>)>,
}

impl Session {
    /// A session over `ctx` (which it shares: tables created in the session
    /// are visible through `ctx`).
    pub fn new(ctx: &FedContext, options: ReplOptions) -> Self {
        Self {
            ctx: ctx.clone(),
            options,
            summary: ScriptSummary::default(),
            last: None,
        }
    }

    /// The current settings (`\format` and `\timing` change them).
    pub fn options(&self) -> &ReplOptions {
        &self.options
    }

    /// What the session has run so far.
    pub fn summary(&self) -> &ScriptSummary {
        &self.summary
    }

    /// Runs a script — statements and backslash commands, one command per
    /// line — as if typed line by line. A statement left without `;` at the
    /// end still runs.
    pub async fn run_text(&mut self, text: &str, out: &mut dyn Write) -> Result<Flow> {
        self.run_text_at(text, out, 0).await
    }

    /// Runs what one line completed (see [`LineBuffer::push_line`]) in
    /// order, applying the error policy to each failure.
    pub async fn run_inputs(
        &mut self,
        inputs: Vec<Result<Input>>,
        out: &mut dyn Write,
    ) -> Result<Flow> {
        self.run_inputs_at(inputs, out, 0).await
    }

    /// Runs one command or statement, printing its result to `out`.
    pub async fn run(&mut self, input: Input, out: &mut dyn Write) -> Result<Flow> {
        self.run_at(input, out, 0).await
    }

    // The `_at` forms carry how deep `\i` files are nested. A parameter
    // rather than a field: a query cancelled by Ctrl-C drops the future
    // midway, and a field would then stay counted up.

    async fn run_text_at(&mut self, text: &str, out: &mut dyn Write, depth: usize) -> Result<Flow> {
        let mut buffer = LineBuffer::new();
        for line in text.lines() {
            if self
                .run_inputs_at(buffer.push_line(line), out, depth)
                .await?
                == Flow::Quit
            {
                return Ok(Flow::Quit);
            }
        }
        self.run_inputs_at(buffer.finish(), out, depth).await
    }

    async fn run_inputs_at(
        &mut self,
        inputs: Vec<Result<Input>>,
        out: &mut dyn Write,
        depth: usize,
    ) -> Result<Flow> {
        for input in inputs {
            let is_command = matches!(input, Ok(Input::Command(_)));
            let result = match input {
                Ok(input) => self.run_at(input, out, depth).await,
                Err(error) => Err(error),
            };
            match result {
                Ok(Flow::Quit) => {
                    self.summary.quit = true;
                    return Ok(Flow::Quit);
                }
                Ok(Flow::Continue) if is_command => self.summary.commands += 1,
                Ok(Flow::Continue) => self.summary.statements += 1,
                Err(error) => self.fail(error, out)?,
            }
            out.flush()?;
        }
        Ok(Flow::Continue)
    }

    async fn run_at(&mut self, input: Input, out: &mut dyn Write, depth: usize) -> Result<Flow> {
        match input {
            Input::Statement(sql) => self.run_statement(&sql, out).await.map(|()| Flow::Continue),
            Input::Command(command) => self.run_command(command, out, depth).await,
        }
    }

    fn fail(&mut self, error: FedError, out: &mut dyn Write) -> Result<()> {
        self.summary.errors += 1;
        if self.options.stop_on_error {
            return Err(error);
        }
        writeln!(out, "Error: {error}")?;
        out.flush()?;
        Ok(())
    }

    async fn run_statement(&mut self, sql: &str, out: &mut dyn Write) -> Result<()> {
        let start = Instant::now();
        let df = self.ctx.sql(sql).await?;
        let schema: SchemaRef = df.schema().inner().clone();
        let result = df.collect().await;
        if self.options.progress {
            // Clear the progress line a long fit may have drawn.
            eprint!("\r\x1b[K");
        }
        let notices = self.ctx.take_notices();
        let batches = result?;
        let elapsed = start.elapsed();
        let mut out = out;
        print::print_batches(&batches, &schema, self.options.format, &mut out)?;
        // Warnings and model summaries (a GLM's deviance lines), as R prints
        // them under the coefficients.
        for notice in notices {
            writeln!(out, "{notice}")?;
        }
        if self.options.timing {
            print::print_timing(print::row_count(&batches, &schema), elapsed, &mut out)?;
        }
        self.last = Some((schema, batches));
        Ok(())
    }

    async fn run_command(
        &mut self,
        command: Command,
        out: &mut dyn Write,
        depth: usize,
    ) -> Result<Flow> {
        let mut out = out;
        match command {
            Command::Help => self.print(&Command::help_batch()?, &mut out)?,
            Command::Quit => return Ok(Flow::Quit),
            Command::ListTables => {
                let tables = self.ctx.tables().await?;
                self.print(&tables_batch(&tables)?, &mut out)?;
            }
            Command::DescribeTable(name) => {
                let table = self.find_table(&name).await?;
                self.print(&columns_batch(&table)?, &mut out)?;
                if self.options.format == OutputFormat::Table {
                    match table.clients {
                        Some(n) => writeln!(
                            out,
                            "federated table over {n} client(s): \\clients {} lists them",
                            table.name
                        )?,
                        None => writeln!(out, "shared table")?,
                    }
                }
            }
            Command::Clients(name) => {
                let batch = self.ctx.clients_batch(&name).await?;
                self.print(&batch, &mut out)?;
            }
            Command::Timing(setting) => {
                self.options.timing = setting.unwrap_or(!self.options.timing);
                let state = if self.options.timing { "on" } else { "off" };
                writeln!(out, "Timing is {state}.")?;
            }
            Command::Format(None) => writeln!(out, "Output format is {}.", self.options.format)?,
            Command::Format(Some(format)) => {
                self.options.format = format;
                writeln!(out, "Output format is {format}.")?;
            }
            Command::Include(path) => return self.include(&path, out, depth).await,
            Command::Chart { y, x } => {
                let (schema, batches) = self.last.as_ref().ok_or_else(|| {
                    FedError::InvalidArgument(
                        "\\chart draws the last result: run a query first, e.g. SELECT * FROM fedsgd_history(...)".into(),
                    )
                })?;
                // A histogram (the last result of `hist`) is drawn as bars.
                let text = if y.is_none() && crate::stats::hist::is_histogram(schema) {
                    crate::stats::bar_chart::bar_chart(batches, schema)?
                } else {
                    crate::chart::line_chart(batches, schema, y.as_deref(), x.as_deref())?
                };
                write!(out, "{text}")?;
            }
        }
        Ok(Flow::Continue)
    }

    async fn include(&mut self, path: &Path, out: &mut dyn Write, depth: usize) -> Result<Flow> {
        if depth >= MAX_INCLUDE_DEPTH {
            return Err(FedError::InvalidArgument(format!(
                "\\i {}: files include each other more than {MAX_INCLUDE_DEPTH} deep (does a file include itself?)",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            FedError::InvalidArgument(format!("\\i {}: cannot read the file: {e}", path.display()))
        })?;
        Box::pin(self.run_text_at(&text, out, depth + 1)).await
    }

    async fn find_table(&self, name: &str) -> Result<TableInfo> {
        let tables = self.ctx.tables().await?;
        let exact = tables.iter().position(|t| t.name == name);
        let folded = || {
            tables
                .iter()
                .position(|t| t.name.eq_ignore_ascii_case(name))
        };
        match exact.or_else(folded) {
            Some(i) => Ok(tables[i].clone()),
            None => Err(FedError::UnknownObject(format!(
                "no table named `{name}`: \\d lists the tables"
            ))),
        }
    }

    fn print(&self, batch: &RecordBatch, out: &mut impl Write) -> Result<()> {
        print::print_batches(
            std::slice::from_ref(batch),
            batch.schema_ref(),
            self.options.format,
            out,
        )
    }
}

/// `\d`: one row per table.
fn tables_batch(tables: &[TableInfo]) -> Result<RecordBatch> {
    let kind = |t: &TableInfo| {
        if t.clients.is_some() {
            "federated"
        } else {
            "shared"
        }
    };
    let columns = |t: &TableInfo| {
        let names: Vec<&str> = t
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        names.join(", ")
    };
    batch(
        vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("kind", DataType::Utf8, false),
            Field::new("clients", DataType::UInt64, true),
            Field::new("columns", DataType::Utf8, false),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(
                tables.iter().map(|t| t.name.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(tables.iter().map(kind))),
            Arc::new(UInt64Array::from_iter(
                tables.iter().map(|t| t.clients.map(|n| n as u64)),
            )),
            Arc::new(StringArray::from_iter_values(tables.iter().map(columns))),
        ],
    )
}

/// `\d NAME`: one row per column.
fn columns_batch(table: &TableInfo) -> Result<RecordBatch> {
    let fields = table.schema.fields();
    batch(
        vec![
            Field::new("column", DataType::Utf8, false),
            Field::new("type", DataType::Utf8, false),
            Field::new("nullable", DataType::Utf8, false),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(
                fields.iter().map(|f| f.name().as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                fields.iter().map(|f| f.data_type().to_string()),
            )),
            Arc::new(StringArray::from_iter_values(
                fields
                    .iter()
                    .map(|f| if f.is_nullable() { "YES" } else { "NO" }),
            )),
        ],
    )
}

fn batch(fields: Vec<Field>, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}
