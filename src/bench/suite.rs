//! The aggregate suite shared with the reference measurements: its
//! queries, each under a `-- name:` line.

/// One query of the suite.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SuiteQuery {
    pub(crate) name: String,
    pub(crate) sql: String,
}

impl SuiteQuery {
    /// Approximate aggregates (t-digest, HyperLogLog) merge sketches, so the
    /// federated answer may differ slightly from one pass over all rows.
    pub(crate) fn is_approximate(&self) -> bool {
        self.sql.to_ascii_lowercase().contains("approx_")
    }
}

/// Reads the suite format: a `-- name: <id>` line, then the query (up to the
/// line ending with `;`). Other `--` lines and blank lines are comments.
pub(crate) fn parse_suite(text: &str) -> Vec<SuiteQuery> {
    let mut queries = Vec::new();
    let mut current: Option<(String, Vec<&str>)> = None;
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("-- name:") {
            current = Some((name.trim().to_string(), Vec::new()));
            continue;
        }
        if line.is_empty() || line.starts_with("--") {
            continue;
        }
        if let Some((name, lines)) = current.as_mut() {
            lines.push(line);
            if line.ends_with(';') {
                let sql = lines.join(" ");
                queries.push(SuiteQuery {
                    name: std::mem::take(name),
                    sql: sql.trim_end_matches(';').trim().to_string(),
                });
                current = None;
            }
        }
    }
    queries
}
