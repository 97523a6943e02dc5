//! CSV at a site: the CSV options a table may set (for every site, or
//! for one as `'format.null_value.<site>'`), the tokens read as a missing
//! value, the arrow CSV format they give, and a value the CSV reader could
//! not parse, read from arrow's error to name its line and column.
//!
//! Missing values come as R writes them (`NA`), as pandas does (an empty
//! field) or as databases do (`NULL`, `NaN`): by default all of these are
//! missing in a column of numbers (or dates, or booleans), and a text
//! column keeps its text. A table's `'format.null_value' 'X'` replaces the
//! default: then `X` (and an empty field) is missing in every column.

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
            "column `{}`: '{}' at data row {} (file line {line}{}{file}) is not a {}; fix the value, declare the column's type (e.g. VARCHAR), or, if it marks a missing value, add OPTIONS ('format.null_value' '{}') (or 'format.null_value.<site>' for this site only)",
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

/// The CSV options of one site, by DataFusion's names: the table's
/// (`'format.null_value'`), then the site's own
/// (`'format.null_value.<site>'`, any case) over them; other keys are left
/// to their own checks.
pub(crate) fn csv_options_for(
    options: &[(String, String)],
    site: Option<&str>,
) -> Result<CsvOptions> {
    use datafusion::common::config::ConfigField;
    let mut csv = CsvOptions::default();
    let set = |csv: &mut CsvOptions, key: &str, name: &str, value: &str| {
        csv.set(name, value)
            .map_err(|e| FedError::InvalidArgument(format!("option '{key}' '{value}': {e}")))
    };
    for (key, value) in options {
        let lower = key.to_ascii_lowercase();
        if CSV_OPTION_KEYS.contains(&lower.as_str()) {
            set(&mut csv, key, &lower["format.".len()..], value)?;
        }
    }
    let Some(site) = site else {
        return Ok(csv);
    };
    for (key, value) in options {
        if let Some((base, name)) = site_csv_key(key)
            && name.eq_ignore_ascii_case(site)
        {
            set(&mut csv, key, &base["format.".len()..], value)?;
        }
    }
    Ok(csv)
}

/// A CSV option set for one site (`format.null_value.r_site`): the
/// option's key and the site's name as written.
pub(crate) fn site_csv_key(key: &str) -> Option<(&'static str, &str)> {
    let lower = key.to_ascii_lowercase();
    CSV_OPTION_KEYS.iter().find_map(|base| {
        let rest = lower.strip_prefix(base)?.strip_prefix('.')?;
        (!rest.is_empty()).then(|| (*base, &key[key.len() - rest.len()..]))
    })
}

/// The tokens R and spreadsheets write for a missing value.
pub(super) const NA_TOKENS: &[&str] = &[
    "NA", "N/A", "NaN", "na", "n/a", "null", "NULL", ".", "-", "?",
];

/// What a site reads as missing by default, besides an empty field: R's
/// `NA`, and `NaN` and `NULL` (pandas writes an empty field).
pub(crate) const DEFAULT_MISSING: &[&str] = &["NA", "NaN", "NULL"];

/// The tokens a site reads as missing besides an empty field, and whether
/// they are missing in text columns too (a table's own `null_value`) or in
/// the other columns only (the default).
pub(crate) fn missing_tokens(csv: &CsvOptions) -> (Vec<&str>, bool) {
    match csv.null_value.as_deref() {
        None => (DEFAULT_MISSING.to_vec(), false),
        Some("") => (Vec::new(), true),
        Some(token) => (vec![token], true),
    }
}

/// Whether a CSV file holds one of `tokens` as a whole field anywhere
/// (quoted or not). It reads the file once, in blocks; a match across a
/// block's edge is found as the blocks overlap, and a false match (a
/// header named `NA`) only costs the reading of the file as text.
pub(crate) fn holds_tokens(
    mut read: impl std::io::Read,
    tokens: &[&str],
    delimiter: u8,
) -> std::io::Result<bool> {
    if tokens.is_empty() {
        return Ok(false);
    }
    let alternatives: Vec<String> = tokens.iter().map(|t| regex::escape(t)).collect();
    let delimiter = regex::escape(&(delimiter as char).to_string());
    let pattern = format!(
        r#"(?m)(?:^|{delimiter})"?(?:{})"?(?:{delimiter}|\r?$)"#,
        alternatives.join("|")
    );
    let Ok(found) = regex::bytes::Regex::new(&pattern) else {
        return Ok(true);
    };
    let overlap = tokens.iter().map(|t| t.len()).max().unwrap_or(0) + 4;
    let mut block = vec![0u8; 1 << 22];
    let mut kept = 0usize;
    loop {
        let n = read.read(&mut block[kept..])?;
        if n == 0 {
            return Ok(kept > 0 && found.is_match(&block[..kept]));
        }
        let end = kept + n;
        if end < block.len() {
            kept = end;
            continue;
        }
        if found.is_match(&block[..end]) {
            return Ok(true);
        }
        block.copy_within(end - overlap..end, 0);
        kept = overlap;
    }
}

/// The arrow CSV format for `csv` (delimiter, quote, escape, header, and
/// the missing tokens as a NULL pattern, an empty field among them).
pub(crate) fn csv_format(csv: &CsvOptions) -> std::result::Result<CsvFileFormat, String> {
    let mut format = CsvFileFormat::default()
        .with_header(csv.has_header.unwrap_or(true))
        .with_delimiter(csv.delimiter)
        .with_quote(csv.quote);
    if let Some(escape) = csv.escape {
        format = format.with_escape(escape);
    }
    let (tokens, _) = missing_tokens(csv);
    if !tokens.is_empty() {
        let alternatives: Vec<String> = tokens.iter().map(|t| regex::escape(t)).collect();
        let regex = regex::Regex::new(&format!("^(?:{})?$", alternatives.join("|")))
            .map_err(|e| format!("format.null_value: {e}"))?;
        format = format.with_null_regex(regex);
    }
    Ok(format)
}
