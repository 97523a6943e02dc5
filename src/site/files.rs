//! A site's files: finding them, and observing and unifying their schemas.
//!
//! A site's rows are a set of local CSV or Parquet files ([`ClientFiles`]):
//! one file, a folder of files, or (for `LOCATION`) a folder whose files or
//! subfolders are the sites. Each file's schema is observed as DataFusion
//! would infer it ([`observe_schemas`]) and the schemas are unified
//! ([`unify_schemas`]), naming the site, file and column whenever they
//! disagree. Both an embedded site and a worker use this.
//! CSV's own options, format and parse errors are in [`csv`].

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::csv::ReaderBuilder;
use datafusion::arrow::csv::reader::Format as CsvFileFormat;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::config::CsvOptions;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;

use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;

use crate::error::{FedError, Result};

mod csv;

use csv::NA_TOKENS;
pub(crate) use csv::{
    CSV_OPTION_KEYS, ParseFailure, csv_format, csv_options_for, holds_tokens, missing_tokens,
    site_csv_key,
};

/// Rows to read for CSV schema inference, as DataFusion does.
const CSV_INFER_ROWS: usize = 1000;

/// How a client's files are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Csv,
    Parquet,
}

impl FileFormat {
    /// Parses `CSV` / `PARQUET` (any case).
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "csv" => Ok(FileFormat::Csv),
            "parquet" => Ok(FileFormat::Parquet),
            other => Err(FedError::Syntax(format!(
                "unsupported format `{other}` for a federated table: use STORED AS CSV or STORED AS PARQUET"
            ))),
        }
    }

    /// The format a file's extension says, if any.
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "csv" => Some(FileFormat::Csv),
            "parquet" | "parq" => Some(FileFormat::Parquet),
            _ => None,
        }
    }

    /// The usual file extension, with its dot.
    pub fn extension(self) -> &'static str {
        match self {
            FileFormat::Csv => ".csv",
            FileFormat::Parquet => ".parquet",
        }
    }
}

impl fmt::Display for FileFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileFormat::Csv => "CSV",
            FileFormat::Parquet => "PARQUET",
        })
    }
}

/// Where one client's rows are: a set of local files in one format.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientFiles {
    /// The client's name (file stem or folder name, or as declared).
    pub name: String,
    pub format: FileFormat,
    /// The files, sorted; never empty.
    pub files: Vec<PathBuf>,
    /// The path the user gave (a file or a folder), for messages.
    pub location: PathBuf,
    /// How CSV files are read (DataFusion's CSV options; `null_value` is
    /// also read as NULL).
    pub csv: CsvOptions,
}

impl ClientFiles {
    /// A client from a path that is either one file or a folder of files.
    /// The format comes from the file extension, or `default` when given.
    pub fn from_path(name: &str, path: &Path, default: Option<FileFormat>) -> Result<Self> {
        let client_err = |message: String| FedError::Client {
            client: name.to_string(),
            location: path.display().to_string(),
            message,
        };
        let meta = std::fs::metadata(path).map_err(|e| client_err(format!("cannot read: {e}")))?;
        if meta.is_file() {
            let format = FileFormat::from_path(path).or(default).ok_or_else(|| {
                client_err("cannot tell the file format from the extension: add STORED AS CSV or STORED AS PARQUET".into())
            })?;
            return Ok(ClientFiles {
                name: name.to_string(),
                format,
                files: vec![path.to_path_buf()],
                location: path.to_path_buf(),
                csv: CsvOptions::default(),
            });
        }
        let mut files = Vec::new();
        for entry in
            read_dir_sorted(path).map_err(|e| client_err(format!("cannot list folder: {e}")))?
        {
            if entry.is_file() && FileFormat::from_path(&entry).is_some() {
                files.push(entry);
            }
        }
        let formats: Vec<FileFormat> = files
            .iter()
            .filter_map(|f| FileFormat::from_path(f))
            .collect();
        let format = match default {
            Some(format) => format,
            None => *formats
                .first()
                .ok_or_else(|| client_err("the folder holds no .csv or .parquet files".into()))?,
        };
        files.retain(|f| FileFormat::from_path(f) == Some(format));
        if files.is_empty() {
            return Err(client_err(format!(
                "the folder holds no {} files",
                format.extension()
            )));
        }
        if formats.iter().any(|f| *f != format) {
            return Err(client_err(format!(
                "the folder mixes CSV and Parquet files; one client's folder must hold one format ({format} here)"
            )));
        }
        Ok(ClientFiles {
            name: name.to_string(),
            format,
            files,
            location: path.to_path_buf(),
            csv: CsvOptions::default(),
        })
    }

    /// Every file directly in `dir` (or every subfolder, holding that
    /// client's files) is one client, named by its file stem / folder name.
    pub fn discover(dir: &Path, format: Option<FileFormat>) -> Result<Vec<Self>> {
        let entries = read_dir_sorted(dir).map_err(|e| {
            FedError::InvalidArgument(format!(
                "cannot list LOCATION '{}': {e}; give a folder whose files (or subfolders) are the clients",
                dir.display()
            ))
        })?;
        let mut clients = Vec::new();
        for entry in entries {
            let is_data_file = entry.is_file()
                && FileFormat::from_path(&entry)
                    .is_some_and(|f| format.is_none_or(|want| want == f));
            if entry.is_dir() || is_data_file {
                let name = if entry.is_dir() {
                    entry.file_name()
                } else {
                    entry.file_stem()
                };
                let name = name
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                clients.push(ClientFiles::from_path(&name, &entry, format)?);
            }
        }
        if clients.is_empty() {
            let what = format.map(|f| f.extension()).unwrap_or(".csv or .parquet");
            return Err(FedError::InvalidArgument(format!(
                "LOCATION '{}' holds no {what} files and no client subfolders",
                dir.display()
            )));
        }
        if clients.iter().any(|c| c.format != clients[0].format) && format.is_none() {
            return Err(FedError::InvalidArgument(format!(
                "LOCATION '{}' mixes CSV and Parquet clients: add STORED AS, or name each client with CLIENTS (...)",
                dir.display()
            )));
        }
        Ok(clients)
    }

    /// The same client, its CSV files read with `csv`.
    pub fn with_csv(mut self, csv: CsvOptions) -> Self {
        self.csv = csv;
        self
    }

    /// Whether a CSV file's first line is its header (the default).
    pub fn has_header(&self) -> bool {
        self.csv.has_header.unwrap_or(true)
    }

    /// The files as a string for messages.
    pub fn describe(&self) -> String {
        self.location.display().to_string()
    }
}

/// Sorted entries of a folder, skipping hidden files.
fn read_dir_sorted(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.') || n.starts_with('_'));
        if !hidden {
            entries.push(path);
        }
    }
    entries.sort();
    Ok(entries)
}

/// A column's type as seen at one client, with where it was seen.
#[derive(Debug, Clone)]
pub(crate) struct ObservedSchema {
    pub client: String,
    pub file: String,
    pub schema: Schema,
    /// `false` when the file had no data rows, so its types are no evidence.
    pub has_rows: bool,
    /// CSV reads columns by position, so their order must agree.
    pub positional: bool,
    /// Text columns that are numbers but for one NA-like token: (column,
    /// token). They were meant to be numeric (see [`na_hint`]).
    pub na_text: Vec<(String, String)>,
}

/// What to say about a column that reads as text because of an NA-like
/// token, if `seen` found one there.
pub(crate) fn na_hint(seen: &ObservedSchema, column: &str) -> Option<String> {
    let (_, token) = seen.na_text.iter().find(|(c, _)| c == column)?;
    Some(format!(
        "column `{column}` reads as text at site '{}' because of '{token}' tokens among its numbers: if they mean a missing value, add OPTIONS ('format.null_value.{}' '{token}') (or 'format.null_value' '{token}' for every site)",
        seen.client, seen.client
    ))
}

/// What to say about a column that is text at `text` only because of an
/// NA-like token, while site `numeric` read it as numbers of type `other`.
fn na_conflict(
    text: &ObservedSchema,
    numeric: &ObservedSchema,
    column: &str,
    other: &DataType,
) -> Option<String> {
    let (_, token) = text.na_text.iter().find(|(c, _)| c == column)?;
    Some(format!(
        "column `{column}` reads as text at site '{}' only because of '{token}' tokens among its numbers, while site '{}' reads it as {other}: if '{token}' marks a missing value there, add OPTIONS ('format.null_value.{}' '{token}') (or 'format.null_value' '{token}' for every site); NA, NaN, NULL and empty fields are missing by default",
        text.client, numeric.client, text.client
    ))
}

/// Unifies the schemas seen at every client into the federated schema.
///
/// All clients must have the same columns. Integer at one client and float
/// at another widen to float; integers of different widths widen to Int64;
/// string kinds unify to Utf8. Anything else is an error naming the client,
/// file and column, and suggesting a declared column list.
pub(crate) fn unify_schemas(table: &str, observed: &[ObservedSchema]) -> Result<Schema> {
    let Some(first) = observed.first() else {
        return Err(FedError::InvalidArgument(format!(
            "federated table `{table}` has no clients"
        )));
    };
    let mut fields: Vec<(Field, &ObservedSchema)> = first
        .schema
        .fields()
        .iter()
        .map(|f| (f.as_ref().clone().with_nullable(true), first))
        .collect();
    for seen in &observed[1..] {
        for (index, (field, origin)) in fields.iter_mut().enumerate() {
            let Some((found_at, theirs)) = seen.schema.column_with_name(field.name()) else {
                return Err(FedError::Client {
                    client: seen.client.clone(),
                    location: seen.file.clone(),
                    message: format!(
                        "missing column `{}` (client '{}' has it); all clients of `{table}` must have the same columns",
                        field.name(),
                        origin.client
                    ),
                });
            };
            if seen.positional && found_at != index {
                return Err(FedError::Client {
                    client: seen.client.clone(),
                    location: seen.file.clone(),
                    message: format!(
                        "column `{}` is at position {} here but {} at client '{}'; CSV columns must come in the same order at every client",
                        field.name(),
                        found_at + 1,
                        index + 1,
                        origin.client
                    ),
                });
            }
            if !seen.has_rows {
                continue;
            }
            if !origin.has_rows {
                *field = field.clone().with_data_type(theirs.data_type().clone());
                *origin = seen;
                continue;
            }
            match unify_types(field.data_type(), theirs.data_type()) {
                Some(t) => *field = field.clone().with_data_type(t),
                None => {
                    if let Some(hint) = na_conflict(seen, origin, field.name(), field.data_type())
                        .or_else(|| na_conflict(origin, seen, field.name(), theirs.data_type()))
                    {
                        return Err(FedError::Client {
                            client: seen.client.clone(),
                            location: seen.file.clone(),
                            message: hint,
                        });
                    }
                    return Err(FedError::Client {
                        client: seen.client.clone(),
                        location: seen.file.clone(),
                        message: format!(
                            "column `{}` is {} here but {} at client '{}' ({}); declare the column types, e.g. CREATE FEDERATED TABLE {table} ({} VARCHAR, ...) ...",
                            field.name(),
                            theirs.data_type(),
                            field.data_type(),
                            origin.client,
                            origin.file,
                            field.name(),
                        ),
                    });
                }
            }
        }
        if let Some(extra) = seen
            .schema
            .fields()
            .iter()
            .find(|f| first.schema.column_with_name(f.name()).is_none())
        {
            return Err(FedError::Client {
                client: seen.client.clone(),
                location: seen.file.clone(),
                message: format!(
                    "has column `{}` that client '{}' lacks; all clients of `{table}` must have the same columns",
                    extra.name(),
                    first.client
                ),
            });
        }
    }
    Ok(Schema::new(
        fields.into_iter().map(|(f, _)| f).collect::<Vec<_>>(),
    ))
}

/// The common type of a column seen as `a` at one client and `b` at another.
fn unify_types(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    let is_string = |t: &DataType| matches!(t, Utf8 | LargeUtf8 | Utf8View);
    match (a, b) {
        _ if a == b => Some(a.clone()),
        (Null, t) | (t, Null) => Some(t.clone()),
        _ if a.is_integer() && b.is_integer() => Some(Int64),
        _ if a.is_numeric() && b.is_numeric() && (a.is_floating() || b.is_floating()) => {
            Some(Float64)
        }
        _ if is_string(a) && is_string(b) => Some(Utf8),
        _ => None,
    }
}

/// The schema of each of a client's files, as DataFusion would infer it.
pub(crate) fn observe_schemas(client: &ClientFiles) -> Result<Vec<ObservedSchema>> {
    client
        .files
        .iter()
        .map(|file| observe_file(client, file))
        .collect()
}

fn observe_file(client: &ClientFiles, file: &Path) -> Result<ObservedSchema> {
    let err = |message: String| FedError::Client {
        client: client.name.clone(),
        location: file.display().to_string(),
        message,
    };
    let handle = File::open(file).map_err(|e| err(format!("cannot open: {e}")))?;
    let mut na_text = Vec::new();
    let (schema, has_rows, positional) = match client.format {
        FileFormat::Csv => {
            let csv = &client.csv;
            let format = csv_format(csv).map_err(err)?;
            let read = |handle: File| {
                FileCompressionType::from(csv.compression)
                    .convert_read(handle)
                    .map_err(|e| err(format!("cannot decompress: {e}")))
            };
            let (schema, rows) = format
                .infer_schema(read(handle)?, Some(CSV_INFER_ROWS))
                .map_err(|e| err(format!("not a readable CSV file with a header row: {e}")))?;
            if schema.fields().is_empty() {
                return Err(err(
                    "the CSV file is empty: it needs at least a header row".into()
                ));
            }
            let handle = File::open(file).map_err(|e| err(format!("cannot open: {e}")))?;
            na_text = text_because_of_na(&format, &schema, read(handle)?);
            (schema, rows > 0, true)
        }
        FileFormat::Parquet => {
            // The parquet crate panics on some malformed footers (an
            // embedded Arrow schema of an unknown type): an error too.
            let meta = std::panic::catch_unwind(|| {
                datafusion::parquet::arrow::arrow_reader::ArrowReaderMetadata::load(
                    &handle,
                    Default::default(),
                )
            })
            .unwrap_or_else(|panic| {
                Err(datafusion::parquet::errors::ParquetError::General(
                    crate::error::panic_message(panic.as_ref()),
                ))
            })
            .map_err(|e| err(format!("not a readable Parquet file: {e}")))?;
            let rows = meta.metadata().file_metadata().num_rows();
            (Schema::new(meta.schema().fields().clone()), rows > 0, false)
        }
    };
    Ok(ObservedSchema {
        client: client.name.clone(),
        file: file.display().to_string(),
        schema,
        has_rows,
        positional,
        na_text,
    })
}

/// The text columns whose values, apart from one NA-like token, are all
/// numbers: (column, token). Such a column was meant to be numeric.
fn text_because_of_na(
    format: &CsvFileFormat,
    schema: &Schema,
    read: Box<dyn std::io::Read + Send>,
) -> Vec<(String, String)> {
    let text = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let Ok(reader) = ReaderBuilder::new(Arc::clone(&text))
        .with_format(format.clone())
        .build(std::io::BufReader::new(read))
    else {
        return Vec::new();
    };
    let batches: Vec<_> = reader.take(4).filter_map(|b| b.ok()).collect();
    let mut found = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        if !matches!(field.data_type(), DataType::Utf8 | DataType::Utf8View) {
            continue;
        }
        let (mut token, mut numbers, mut other) = (None::<String>, 0usize, false);
        for batch in &batches {
            let values = batch.column(i).as_string::<i32>();
            for v in values.iter().flatten() {
                let v = v.trim();
                if v.parse::<f64>().is_ok() {
                    numbers += 1;
                } else if NA_TOKENS.contains(&v) && token.as_deref().is_none_or(|t| t == v) {
                    token = Some(v.to_string());
                } else {
                    other = true;
                }
            }
        }
        if let (Some(token), false, true) = (token, other, numbers > 0) {
            found.push((field.name().clone(), token));
        }
    }
    found
}

/// Checks a declared schema against the schema seen at one client.
pub(crate) fn check_declared_schema(seen: ObservedSchema, declared: &Schema) -> Result<()> {
    let names: Vec<&str> = seen
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let want: Vec<&str> = declared
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let missing: Vec<&str> = want
        .iter()
        .filter(|n| !names.contains(n))
        .copied()
        .collect();
    let ok = if seen.positional {
        names == want
    } else {
        missing.is_empty()
    };
    if !ok {
        let detail = if missing.is_empty() {
            format!(
                "the header is ({}) but the declared columns are ({})",
                names.join(", "),
                want.join(", ")
            )
        } else {
            format!("missing declared column(s) {}", missing.join(", "))
        };
        return Err(FedError::Client {
            client: seen.client,
            location: seen.file,
            message: detail,
        });
    }
    Ok(())
}

/// The file scan of a plan node, if it is one.
pub(crate) fn file_scan(node: &Arc<dyn ExecutionPlan>) -> Option<&FileScanConfig> {
    node.downcast_ref::<DataSourceExec>()?
        .data_source()
        .downcast_ref::<FileScanConfig>()
}

#[cfg(test)]
mod tests;
