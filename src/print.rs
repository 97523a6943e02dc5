//! Printing query results, in the manner of datafusion-cli.
//!
//! The REPL and the non-interactive CLI print every result — query answers,
//! `EXPLAIN FEDERATED` plans, and the tables of backslash commands such as
//! `\d` and `\?` — through [`print_batches`], in one of the
//! [`OutputFormat`]s. The table format draws an ASCII grid with comfy-table
//! and formats cells with arrow's display formatters (NULL is an empty cell,
//! as in datafusion-cli); csv, json and ndjson use arrow's own writers, so the
//! output can be read back by other tools. [`print_timing`] prints
//! datafusion-cli's row-count and elapsed-time line.

use std::fmt;
use std::io::Write;
use std::str::FromStr;
use std::time::Duration;

use comfy_table::{Cell, Table};
use datafusion::arrow::csv;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::json::{ArrayWriter, LineDelimitedWriter};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;

use crate::error::{FedError, Result};

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

/// Prints a result in `format`.
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
    if schema.fields().is_empty() {
        return Ok(());
    }
    match format {
        OutputFormat::Table => writeln!(out, "{}", table(batches, schema)?)?,
        OutputFormat::Csv => {
            let mut writer = csv::WriterBuilder::new().with_header(true).build(&mut *out);
            if batches.iter().all(|b| b.num_rows() == 0) {
                // The writer prints its header with the first batch it sees.
                writer.write(&RecordBatch::new_empty(schema.clone()))?;
            }
            for batch in batches {
                writer.write(batch)?;
            }
        }
        OutputFormat::Json => {
            let mut writer = ArrayWriter::new(&mut *out);
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
            writeln!(out)?;
        }
        OutputFormat::NdJson => {
            let mut writer = LineDelimitedWriter::new(&mut *out);
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
    }
    Ok(())
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

fn table(batches: &[RecordBatch], schema: &SchemaRef) -> Result<Table> {
    let mut table = Table::new();
    // The preset of arrow's pretty printer, which datafusion-cli uses.
    table.load_preset("||--+-++|    ++++++");
    table.set_header(schema.fields().iter().map(|f| Cell::new(f.name())));
    let options = FormatOptions::default().with_display_error(true);
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
            // A trailing newline (multi-line text such as a plan) would draw
            // an empty line inside the cell.
            table.add_row(formatters.iter().zip(batch.columns()).map(|(f, column)| {
                let text = crate::matrix_display::labeled(column.as_ref(), row)
                    .unwrap_or_else(|| f.value(row).to_string());
                Cell::new(text.trim_end_matches('\n'))
            }));
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
    fn table_format_shows_null_as_empty() {
        let (schema, batches) = sample();
        let expected = "\
+--------+----+
| region | n  |
+--------+----+
| north  | 3  |
|        | 12 |
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
            "[{\"region\":\"north\",\"n\":3},{\"n\":12}]\n"
        );
        assert_eq!(
            printed(&batches, &schema, OutputFormat::NdJson),
            "{\"region\":\"north\",\"n\":3}\n{\"n\":12}\n"
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
