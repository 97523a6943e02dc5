//! CSV at a site: the CSV options a table may set, the arrow CSV format
//! they give, and a value the CSV reader could not parse, read from
//! arrow's error to name its line and column.

use crate::error::{FedError, Result};
use datafusion::arrow::csv::reader::Format as CsvFileFormat;
use datafusion::arrow::datatypes::Schema;
use datafusion::common::config::CsvOptions;

/// A value a CSV reader could not parse, as arrow reports it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ParseFailure {
    pub column: String,
    pub value: String,
    pub data_type: String,
    /// 1-based, among the data rows of the file.
    pub data_row: usize,
}

impl ParseFailure {
    /// Reads arrow's "Error while parsing value 'v' as type 't' for column
    /// i at line n" (n counts data rows from 1) against the file's schema.
    pub(crate) fn read(message: &str, schema: &Schema) -> Option<Self> {
        let rest = message.split("Error while parsing value '").nth(1)?;
        let (value, rest) = rest.split_once("' as type '")?;
        let (data_type, rest) = rest.split_once("' for column ")?;
        let (index, rest) = rest.split_once(" at line ")?;
        let row: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        Some(Self {
            column: schema
                .fields()
                .get(index.trim().parse::<usize>().ok()?)?
                .name()
                .clone(),
            value: value.to_string(),
            data_type: data_type.to_string(),
            data_row: row.parse().ok()?,
        })
    }

    /// The message for the data owner's own use (values and lines shown).
    pub(crate) fn describe(&self, header: bool, several_files: bool) -> String {
        let line = self.data_row + usize::from(header);
        let file = if several_files {
            " of one of its files"
        } else {
            ""
        };
        format!(
            "column `{}`: '{}' at data row {} (file line {line}{}{file}) is not a {}; fix the value, declare the column's type (e.g. VARCHAR), or, if it marks a missing value, add OPTIONS ('format.null_value' '{}')",
            self.column,
            self.value,
            self.data_row,
            if header { ", the header counted" } else { "" },
            self.data_type,
            self.value
        )
    }
}

/// The CSV reading options a federated table passes to DataFusion, by
/// DataFusion's names (`OPTIONS ('format.null_value' 'NA')`).
pub(crate) const CSV_OPTION_KEYS: &[&str] = &[
    "format.delimiter",
    "format.null_value",
    "format.has_header",
    "format.quote",
    "format.escape",
    "format.compression",
];

/// The CSV options of a table's OPTIONS (`'format.delimiter'` ...), by
/// DataFusion's names; other keys are left to their own checks.
pub(crate) fn csv_options(options: &[(String, String)]) -> Result<CsvOptions> {
    use datafusion::common::config::ConfigField;
    let mut csv = CsvOptions::default();
    for (key, value) in options {
        let lower = key.to_ascii_lowercase();
        if !CSV_OPTION_KEYS.contains(&lower.as_str()) {
            continue;
        }
        if let Some(name) = lower.strip_prefix("format.") {
            csv.set(name, value)
                .map_err(|e| FedError::InvalidArgument(format!("option '{key}' '{value}': {e}")))?;
        }
    }
    Ok(csv)
}

/// The tokens R and spreadsheets write for a missing value.
pub(super) const NA_TOKENS: &[&str] = &[
    "NA", "N/A", "NaN", "na", "n/a", "null", "NULL", ".", "-", "?",
];

/// The arrow CSV format for `csv` (delimiter, quote, escape, header, and
/// `null_value` as a NULL pattern).
pub(crate) fn csv_format(csv: &CsvOptions) -> std::result::Result<CsvFileFormat, String> {
    let mut format = CsvFileFormat::default()
        .with_header(csv.has_header.unwrap_or(true))
        .with_delimiter(csv.delimiter)
        .with_quote(csv.quote);
    if let Some(escape) = csv.escape {
        format = format.with_escape(escape);
    }
    if let Some(null) = csv.null_value.as_deref().filter(|n| !n.is_empty()) {
        let regex = regex::Regex::new(&format!("^{}$", regex::escape(null)))
            .map_err(|e| format!("format.null_value: {e}"))?;
        format = format.with_null_regex(regex);
    }
    Ok(format)
}
