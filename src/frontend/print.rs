//! Printing query results, in the manner of datafusion-cli.
//!
//! The REPL and the non-interactive CLI print every result — query answers,
//! `EXPLAIN FEDERATED` plans, and the tables of backslash commands such as
//! `\d` and `\?` — through [`print_batches`], in one of the
//! [`OutputFormat`]s.
//!
//! The table format is for people and reads like R: an ASCII grid
//! (comfy-table), floats to [`TableStyle::digits`] significant digits (7, as
//! R prints; `SET fedsql.display_digits = N` or `\digits N`; 0 shows every
//! digit), p-values below 2.2e-16 as `< 2e-16`, and NULL as `NULL` (an empty
//! string stays empty). A model's coefficient table ([`TableStyle::model`])
//! gets R's significance stars beside the p-values and `NA` for aliased terms.
//!
//! csv, json and ndjson are for programs and keep every digit: arrow's own
//! writers, so the output can be read back by other tools. JSON writes NULL
//! as an explicit `null` (the key is always there); JSON has no NaN or
//! infinity, so arrow writes them as `null` too, while CSV writes `NaN`,
//! `inf` and `-inf`. CSV writes a nested value (a list, a struct, a matrix
//! aggregate) as its JSON text in the cell. [`print_timing`] prints
//! datafusion-cli's row-count and elapsed-time line.

use std::fmt;
use std::io::Write;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use comfy_table::{Cell, Table};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::csv;
use datafusion::arrow::datatypes::{
    DataType, Field, Float16Type, Float32Type, Float64Type, Schema, SchemaRef,
};
use datafusion::arrow::json::WriterBuilder as JsonWriterBuilder;
use datafusion::arrow::json::writer::{JsonArray, LineDelimited};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;

use crate::error::{FedError, Result};
use crate::r_format::{P_VALUE_EPSILON, format_number, significance_stars};

/// Significant digits of floats in the table format unless set otherwise
/// (R's default `digits`).
pub const DEFAULT_DIGITS: usize = 7;

/// How the table format shows values (machine formats ignore it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableStyle {
    /// Significant digits of floats; 0 shows every digit.
    pub digits: usize,
    /// A model's coefficient table: stars beside the `p_value` column, and
    /// `NA` (R's word) instead of `NULL` for the cells of aliased terms.
    pub model: bool,
}

impl Default for TableStyle {
    fn default() -> Self {
        Self {
            digits: DEFAULT_DIGITS,
            model: false,
        }
    }
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// An ASCII table with a header row (the default).
    #[default]
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON array of row objects.
    Json,
    /// One JSON object per line.
    #[value(name = "ndjson")]
    NdJson,
}

impl OutputFormat {
    /// Every format, in the order help texts list them.
    pub const ALL: [OutputFormat; 4] = [Self::Table, Self::Csv, Self::Json, Self::NdJson];

    fn name(self) -> &'static str {
        match self {
            Self::Table => "table",
            Self::Csv => "csv",
            Self::Json => "json",
            Self::NdJson => "ndjson",
        }
    }
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OutputFormat {
    type Err = FedError;

    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|format| format.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                FedError::Syntax(format!(
                    "unknown output format '{}': use one of table, csv, json, ndjson",
                    s.trim()
                ))
            })
    }
}

/// Prints a result in `format`, tables in the default [`TableStyle`].
///
/// `schema` gives the header, so an empty result still prints its column
/// names (in table and csv format). A result without columns (what DDL
/// returns) prints nothing.
pub fn print_batches(
    batches: &[RecordBatch],
    schema: &SchemaRef,
    format: OutputFormat,
    out: &mut impl Write,
) -> Result<()> {
    print_batches_styled(batches, schema, format, TableStyle::default(), out)
}

/// Prints a result in `format`, a table in `style`.
pub fn print_batches_styled(
    batches: &[RecordBatch],
    schema: &SchemaRef,
    format: OutputFormat,
    style: TableStyle,
    out: &mut impl Write,
) -> Result<()> {
    if schema.fields().is_empty() {
        return Ok(());
    }
    match format {
        OutputFormat::Table => writeln!(out, "{}", table(batches, schema, style)?)?,
        OutputFormat::Csv => {
            let text_schema = nested_as_text_schema(schema);
            let mut writer = csv::WriterBuilder::new().with_header(true).build(&mut *out);
            if batches.iter().all(|b| b.num_rows() == 0) {
                // The writer prints its header with the first batch it sees.
                writer.write(&RecordBatch::new_empty(text_schema.clone()))?;
            }
            for batch in batches {
                writer.write(&nested_as_text(batch, &text_schema)?)?;
            }
        }
        OutputFormat::Json => {
            let mut writer = JsonWriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, JsonArray>(&mut *out);
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
            writeln!(out)?;
        }
        OutputFormat::NdJson => {
            let mut writer = JsonWriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, LineDelimited>(&mut *out);
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
    }
    Ok(())
}

/// The CSV schema: nested columns become text (their JSON).
fn nested_as_text_schema(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            if f.data_type().is_nested() {
                Field::new(f.name(), DataType::Utf8, true)
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// `batch` with every nested column replaced by the JSON text of its values.
fn nested_as_text(batch: &RecordBatch, text_schema: &SchemaRef) -> Result<RecordBatch> {
    if !batch.columns().iter().any(|c| c.data_type().is_nested()) {
        return Ok(batch.clone());
    }
    let columns = batch
        .columns()
        .iter()
        .map(|column| {
            if column.data_type().is_nested() {
                json_texts(column)
            } else {
                Ok(Arc::clone(column))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(text_schema.clone(), columns)?)
}

/// Each value of `column` as JSON text (NULL stays NULL), through arrow's
/// JSON writer: one line `{"v":<value>}` per row.
fn json_texts(column: &ArrayRef) -> Result<ArrayRef> {
    let one = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "v",
            column.data_type().clone(),
            true,
        )])),
        vec![Arc::clone(column)],
    )?;
    let mut lines = Vec::new();
    let mut writer = JsonWriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, LineDelimited>(&mut lines);
    writer.write(&one)?;
    writer.finish()?;
    drop(writer);
    let text = String::from_utf8(lines)
        .map_err(|e| FedError::Internal(format!("arrow's JSON is not UTF-8: {e}")))?;
    let values: Vec<Option<&str>> = text
        .lines()
        .enumerate()
        .map(|(row, line)| {
            if column.is_null(row) {
                None
            } else {
                line.strip_prefix("{\"v\":")
                    .and_then(|rest| rest.strip_suffix('}'))
            }
        })
        .collect();
    Ok(Arc::new(StringArray::from(values)))
}

/// Prints datafusion-cli's summary line for a result of `rows` rows, e.g.
/// `3 row(s) fetched. ` then `Elapsed 0.012 seconds.` and a blank line.
pub fn print_timing(rows: usize, elapsed: Duration, out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "{rows} row(s) fetched. \nElapsed {:.3} seconds.\n",
        elapsed.as_secs_f64()
    )?;
    Ok(())
}

/// The number of rows a result has; a result without columns (DDL) has none.
pub fn row_count(batches: &[RecordBatch], schema: &SchemaRef) -> usize {
    if schema.fields().is_empty() {
        0
    } else {
        batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// How one column's cells are written in the table format.
#[derive(Clone, Copy)]
struct ColumnStyle {
    float: bool,
    p_value: bool,
}

impl ColumnStyle {
    fn of(field: &Field) -> Self {
        let float = matches!(
            field.data_type(),
            DataType::Float16 | DataType::Float32 | DataType::Float64
        );
        let name = field.name();
        Self {
            float,
            p_value: float && (name == "p_value" || name.ends_with("_p_value")),
        }
    }
}

/// Row `row` of a float column as f64 (`None` for NULL or another type).
fn float_value(column: &dyn Array, row: usize) -> Option<f64> {
    if column.is_null(row) {
        return None;
    }
    match column.data_type() {
        DataType::Float64 => Some(column.as_primitive::<Float64Type>().value(row)),
        DataType::Float32 => Some(f64::from(column.as_primitive::<Float32Type>().value(row))),
        DataType::Float16 => Some(column.as_primitive::<Float16Type>().value(row).to_f64()),
        _ => None,
    }
}

fn table(batches: &[RecordBatch], schema: &SchemaRef, style: TableStyle) -> Result<Table> {
    let mut table = Table::new();
    // The preset of arrow's pretty printer, which datafusion-cli uses.
    table.load_preset("||--+-++|    ++++++");
    let columns: Vec<ColumnStyle> = schema.fields().iter().map(|f| ColumnStyle::of(f)).collect();
    // R's stars stand right of the p-values.
    let stars_after = style
        .model
        .then(|| schema.fields().iter().position(|f| f.name() == "p_value"))
        .flatten();
    let mut header: Vec<Cell> = schema
        .fields()
        .iter()
        .map(|f| Cell::new(f.name()))
        .collect();
    if let Some(i) = stars_after {
        header.insert(i + 1, Cell::new(""));
    }
    table.set_header(header);
    let null = if style.model { "NA" } else { "NULL" };
    let options = FormatOptions::default()
        .with_display_error(true)
        .with_null(null);
    for batch in batches {
        if batch.num_columns() != schema.fields().len() {
            return Err(FedError::DataFusion(DataFusionError::Internal(format!(
                "a result batch has {} columns but its schema {}",
                batch.num_columns(),
                schema.fields().len()
            ))));
        }
        let formatters = batch
            .columns()
            .iter()
            .map(|column| ArrayFormatter::try_new(column.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            let cell = |i: usize| {
                let column = batch.column(i).as_ref();
                let value = float_value(column, row).filter(|_| columns[i].float);
                let text = match value {
                    Some(p) if columns[i].p_value && p < P_VALUE_EPSILON => "< 2e-16".to_string(),
                    Some(v) if style.digits > 0 => format_number(v, style.digits),
                    _ => crate::frontend::matrix_display::labeled(column, row)
                        .unwrap_or_else(|| formatters[i].value(row).to_string()),
                };
                // A trailing newline (multi-line text such as a plan) would
                // draw an empty line inside the cell.
                Cell::new(text.trim_end_matches('\n'))
            };
            let mut cells: Vec<Cell> = (0..batch.num_columns()).map(cell).collect();
            if let Some(i) = stars_after {
                let stars =
                    float_value(batch.column(i).as_ref(), row).map_or("", significance_stars);
                cells.insert(i + 1, Cell::new(stars));
            }
            table.add_row(cells);
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn sample() -> (SchemaRef, Vec<RecordBatch>) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("region", DataType::Utf8, true),
            Field::new("n", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![Some("north"), None])),
                Arc::new(Int64Array::from(vec![3, 12])),
            ],
        )
        .unwrap();
        (schema, vec![batch])
    }

    fn printed(batches: &[RecordBatch], schema: &SchemaRef, format: OutputFormat) -> String {
        let mut out = Vec::new();
        print_batches(batches, schema, format, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn table_format_shows_null_as_null() {
        let (schema, batches) = sample();
        let expected = "\
+--------+----+
| region | n  |
+--------+----+
| north  | 3  |
| NULL   | 12 |
+--------+----+
";
        assert_eq!(printed(&batches, &schema, OutputFormat::Table), expected);
    }

    #[test]
    fn empty_result_prints_its_header() {
        let (schema, _) = sample();
        let table = printed(&[], &schema, OutputFormat::Table);
        assert_eq!(
            table,
            "+--------+---+\n| region | n |\n+--------+---+\n+--------+---+\n"
        );
        assert_eq!(printed(&[], &schema, OutputFormat::Csv), "region,n\n");
        assert_eq!(printed(&[], &schema, OutputFormat::Json), "[]\n");
        assert_eq!(printed(&[], &schema, OutputFormat::NdJson), "");
    }

    #[test]
    fn machine_formats() {
        let (schema, batches) = sample();
        assert_eq!(
            printed(&batches, &schema, OutputFormat::Csv),
            "region,n\nnorth,3\n,12\n"
        );
        assert_eq!(
            printed(&batches, &schema, OutputFormat::Json),
            "[{\"region\":\"north\",\"n\":3},{\"region\":null,\"n\":12}]\n"
        );
        assert_eq!(
            printed(&batches, &schema, OutputFormat::NdJson),
            "{\"region\":\"north\",\"n\":3}\n{\"region\":null,\"n\":12}\n"
        );
    }

    #[test]
    fn no_columns_prints_nothing() {
        let schema = Arc::new(Schema::empty());
        for format in OutputFormat::ALL {
            assert_eq!(printed(&[], &schema, format), "");
        }
    }

    #[test]
    fn timing_line_matches_datafusion_cli() {
        let mut out = Vec::new();
        print_timing(3, Duration::from_millis(12), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "3 row(s) fetched. \nElapsed 0.012 seconds.\n\n"
        );
    }

    #[test]
    fn format_names_round_trip() {
        for format in OutputFormat::ALL {
            assert_eq!(format.to_string().parse::<OutputFormat>().unwrap(), format);
        }
        assert_eq!(
            "NDJSON".parse::<OutputFormat>().unwrap(),
            OutputFormat::NdJson
        );
        assert!("xml".parse::<OutputFormat>().is_err());
    }
}
