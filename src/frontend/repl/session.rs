//! A session: what one REPL (or one run of the CLI) remembers between
//! inputs — the context, the output format, whether to print timing — and
//! how it runs each command and statement.
//!
//! Errors follow [`ReplOptions::stop_on_error`]: an interactive session
//! prints `Error: ...` and goes on; a non-interactive one stops at the first
//! error and hands it back, like psql with `ON_ERROR_STOP` (unless
//! `--on-error continue`: then it goes on, and remembers the first error's
//! exit code).
//!
//! In the table format everything is written to the one output, as psql
//! does. In a machine format (csv, json, ndjson) the output holds only
//! results, so a program can read it: notices (warnings, a model's summary
//! lines), the row-count and timing line, the confirmations of commands
//! and errors go to the session's *diagnostics* writer (stderr).
//!
//! After an `lm` or `glm` coefficient table the table format prints R's
//! `summary()` lines around it (see [`crate::notices::printed_summary`]).

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{ArrayRef, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::coordinator::context::{FedContext, TableInfo};
use crate::coordinator::function_docs::{self, DocumentedFunction, FunctionKind};
use crate::coordinator::settings::fedsql_options;
use crate::error::{FedError, Result};
use crate::frontend::exit_code::ExitCode;
use crate::frontend::print::{self, OutputFormat, TableStyle};
use crate::frontend::repl::command::Command;
use crate::frontend::repl::input::{Input, LineBuffer};
use crate::frontend::repl::progress::ProgressLine;
use crate::frontend::repl::sql_types;
use crate::models::inference::coefficients_schema;

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
    /// Draw a progress line on stderr for long statements (interactive
    /// use, and only on a terminal; see [`crate::frontend::repl::progress`]); it is
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
    /// Where notices, timing, confirmations and errors go in a machine
    /// format (stderr unless [`Session::set_diagnostics`] says otherwise).
    diagnostics: Box<dyn Write + Send>,
    /// The progress line, with [`ReplOptions::progress`] on a terminal.
    progress_line: Option<ProgressLine>,
    /// The exit code of the first error, for a run that went on after it.
    first_error: Option<ExitCode>,
}

impl Session {
    /// A session over `ctx` (which it shares: tables created in the session
    /// are visible through `ctx`).
    pub fn new(ctx: &FedContext, options: ReplOptions) -> Self {
        Self {
            ctx: ctx.clone(),
            options: options.clone(),
            summary: ScriptSummary::default(),
            last: None,
            diagnostics: Box::new(io::stderr()),
            progress_line: options
                .progress
                .then(|| ProgressLine::install(ctx))
                .flatten(),
            first_error: None,
        }
    }

    /// Sends what is not a result, in machine formats, to `writer` instead
    /// of stderr.
    pub fn set_diagnostics(&mut self, writer: Box<dyn Write + Send>) {
        self.diagnostics = writer;
    }

    /// Whether results are for programs: then only results go to the output.
    fn machine_output(&self) -> bool {
        self.options.format != OutputFormat::Table
    }

    /// Writes a line that is not a result: to the output in the table
    /// format, to the diagnostics in a machine format.
    fn say(&mut self, out: &mut dyn Write, text: &str) -> Result<()> {
        if self.machine_output() {
            writeln!(self.diagnostics, "{text}")?;
            self.diagnostics.flush()?;
        } else {
            writeln!(out, "{text}")?;
        }
        Ok(())
    }

    /// How tables print now (`SET fedsql.display_digits`, `\digits`).
    fn table_style(&self) -> TableStyle {
        TableStyle {
            digits: fedsql_options(self.ctx.session()).display_digits,
            model: false,
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

    /// The exit code of the first error so far (see
    /// [`crate::frontend::exit_code`]), or `None` when nothing failed.
    pub fn first_error(&self) -> Option<ExitCode> {
        self.first_error
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
            // Boxed: their futures are large, and `\i` nests this call.
            Input::Statement(sql) => Box::pin(self.run_statement(&sql, out))
                .await
                .map(|()| Flow::Continue),
            Input::Command(command) => Box::pin(self.run_command(command, out, depth)).await,
        }
    }

    fn fail(&mut self, error: FedError, out: &mut dyn Write) -> Result<()> {
        let error = error.unwrapped();
        self.summary.errors += 1;
        self.first_error.get_or_insert(ExitCode::of(&error));
        if self.options.stop_on_error {
            return Err(error);
        }
        self.say(out, &format!("Error: {error}"))?;
        out.flush()?;
        Ok(())
    }

    async fn run_statement(&mut self, sql: &str, out: &mut dyn Write) -> Result<()> {
        let start = Instant::now();
        // Shown after a second; cleared when dropped, also by Ctrl-C.
        let progress = self.progress_line.as_ref().map(ProgressLine::start);
        let df = self.ctx.sql(sql).await?;
        let schema: SchemaRef = df.schema().inner().clone();
        let result = df.collect().await;
        drop(progress);
        let (mut notices, summaries) = self.ctx.take_notices_and_summaries();
        let batches = result?;
        let elapsed = start.elapsed();
        let mut style = self.table_style();
        // R's summary() lines around a model's own coefficient table; any
        // other summary (a projection of the table, say) is a notice.
        let mut around = None;
        for summary in summaries {
            if around.is_none() && !self.machine_output() && is_coefficient_table(&schema) {
                around = Some(summary);
            } else {
                notices.push(summary.text());
            }
        }
        let mut out = out;
        if let Some(summary) = &around {
            write!(out, "{}", summary.header())?;
            style.model = true;
        }
        // A covariance matrix in long form reads as the matrix it is.
        match crate::frontend::matrix_display::vcov_matrix(&batches, &schema) {
            Some(matrix) if !self.machine_output() => print::print_batches_styled(
                std::slice::from_ref(&matrix),
                &matrix.schema(),
                self.options.format,
                style,
                &mut out,
            )?,
            _ => print::print_batches_styled(
                &batches,
                &schema,
                self.options.format,
                style,
                &mut out,
            )?,
        }
        if let Some(summary) = &around {
            writeln!(out, "{}", summary.footer())?;
        }
        // Warnings (a GLM that did not converge), as R prints them under
        // the coefficients.
        for notice in notices {
            self.say(out, &notice)?;
        }
        if self.options.timing {
            let mut line = Vec::new();
            match self.registered(sql, &schema).await {
                // What a CREATE FEDERATED TABLE registered, not "0 rows".
                Some(what) => writeln!(
                    line,
                    "{what}\nElapsed {:.3} seconds.\n",
                    elapsed.as_secs_f64()
                )?,
                None => {
                    print::print_timing(print::row_count(&batches, &schema), elapsed, &mut line)?
                }
            }
            let line = String::from_utf8_lossy(&line);
            self.say(out, line.strip_suffix('\n').unwrap_or(&line))?;
        }
        self.last = Some((schema, batches));
        Ok(())
    }

    /// What a `CREATE FEDERATED TABLE` statement registered, in a line
    /// ("Registered federated table `t`: 4 clients, 12 columns."); `None`
    /// for any other statement.
    async fn registered(&self, sql: &str, schema: &SchemaRef) -> Option<String> {
        if !schema.fields().is_empty()
            || !matches!(
                crate::coordinator::fed_statement::recognise(sql),
                Some(crate::coordinator::fed_statement::FedStatement::CreateFederatedTable)
            )
        {
            return None;
        }
        let name = crate::coordinator::ddl::parse_create_federated(sql)
            .ok()?
            .name;
        let tables = self.ctx.tables().await.ok()?;
        let table = tables.iter().find(|t| t.name == name)?;
        let clients = table.clients?;
        let columns = table.schema.fields().len();
        Some(format!(
            "Registered federated table `{}`: {clients} client{}, {columns} column{}.",
            table.name,
            if clients == 1 { "" } else { "s" },
            if columns == 1 { "" } else { "s" },
        ))
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
            Command::Function(Some(name)) => {
                let text = function_docs::help_text(&self.ctx.session().state(), &name)
                    .ok_or_else(|| {
                        FedError::UnknownObject(format!(
                            "no function `{name}`: SHOW FUNCTIONS lists them all, \\h the ones fedsql adds"
                        ))
                    })?;
                write!(out, "{text}")?;
            }
            Command::Function(None) => {
                let functions = function_docs::documented_functions(&self.ctx.session().state());
                self.print(&functions_batch(&functions)?, &mut out)?;
            }
            Command::Clients(name) => {
                let batch = self.ctx.clients_batch(&name).await?;
                self.print(&batch, &mut out)?;
            }
            Command::Tables(pattern) => {
                let tables: Vec<TableInfo> = self
                    .ctx
                    .tables()
                    .await?
                    .into_iter()
                    .filter(|t| {
                        pattern
                            .as_deref()
                            .is_none_or(|p| matches_pattern(p, &t.name))
                    })
                    .collect();
                self.print(&tables_batch(&tables)?, &mut out)?;
            }
            Command::Timing(setting) => {
                self.options.timing = setting.unwrap_or(!self.options.timing);
                let state = if self.options.timing { "on" } else { "off" };
                self.say(out, &format!("Timing is {state}."))?;
            }
            Command::Format(None) => {
                let text = format!("Output format is {}.", self.options.format);
                self.say(out, &text)?;
            }
            Command::Format(Some(format)) => {
                self.options.format = format;
                self.say(out, &format!("Output format is {format}."))?;
            }
            Command::Digits(setting) => {
                if let Some(digits) = setting {
                    self.ctx
                        .sql(&format!("SET fedsql.display_digits = {digits}"))
                        .await?
                        .collect()
                        .await?;
                }
                let text = match self.table_style().digits {
                    0 => "Floats show all their digits.".to_string(),
                    n => format!("Floats show {n} significant digits."),
                };
                self.say(out, &text)?;
            }
            Command::Reset => self.say(out, "Query buffer reset (cleared).")?,
            Command::Go => {
                return Err(FedError::Syntax(
                    "\\g runs the statement typed so far, and none is".into(),
                ));
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
                    crate::frontend::chart::line_chart(batches, schema, y.as_deref(), x.as_deref())?
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
            None => Err(FedError::UnknownTable(format!(
                "no table named `{name}`: \\d lists the tables"
            ))),
        }
    }

    fn print(&self, batch: &RecordBatch, out: &mut impl Write) -> Result<()> {
        print::print_batches_styled(
            std::slice::from_ref(batch),
            batch.schema_ref(),
            self.options.format,
            self.table_style(),
            out,
        )
    }
}

/// Whether a result is a model's whole coefficient table (`term`,
/// `estimate`, ..., `conf_high`), around which R's summary lines print.
fn is_coefficient_table(schema: &SchemaRef) -> bool {
    let names =
        |s: &Schema| -> Vec<String> { s.fields().iter().map(|f| f.name().clone()).collect() };
    names(schema) == names(&coefficients_schema())
}

/// psql's name patterns: `*` any text, `?` one character, case folded.
fn matches_pattern(pattern: &str, name: &str) -> bool {
    fn matches(p: &[char], n: &[char]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some('*'), _) => matches(&p[1..], n) || (!n.is_empty() && matches(p, &n[1..])),
            (Some('?'), Some(_)) => matches(&p[1..], &n[1..]),
            (Some(a), Some(b)) => a == b && matches(&p[1..], &n[1..]),
            _ => false,
        }
    }
    let fold = |s: &str| -> Vec<char> { s.to_lowercase().chars().collect() };
    matches(&fold(pattern), &fold(name))
}

/// `\h` as a result: one row per function fedsql adds, by family.
fn functions_batch(functions: &[DocumentedFunction]) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("function", DataType::Utf8, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("family", DataType::Utf8, false),
        Field::new("description", DataType::Utf8, false),
    ]));
    let column = |value: &dyn Fn(&DocumentedFunction) -> String| {
        Arc::new(StringArray::from_iter_values(functions.iter().map(value))) as ArrayRef
    };
    Ok(RecordBatch::try_new(
        schema,
        vec![
            column(&|f| f.name.clone()),
            column(&|f| match f.kind {
                FunctionKind::Aggregate => "aggregate".to_string(),
                FunctionKind::Table => "table".to_string(),
            }),
            column(&|f| f.doc.family.label().to_string()),
            column(&|f| f.doc.description.to_string()),
        ],
    )?)
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
                fields
                    .iter()
                    .map(|f| sql_types::sql_type_name(f.data_type())),
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
