//! A site's physical plan as text for `EXPLAIN FEDERATED`, with where its
//! rows live withheld.
//!
//! A worker answers coordinators in other processes, and nothing it
//! answers may say anything about its machine: no path, folder or file
//! name. A plan's file scans name their files (DataFusion's
//! `file_groups=`, fedsql's own Parquet readers' `file=` and `files=`), so
//! the plan is written here node by node, as DataFusion's indented display
//! writes it: a file scan with `file_groups=<files withheld>` in place of
//! its files (and their byte ranges), any other node with the site's file
//! paths replaced. Fail closed: if any form of a file's path, folder or
//! name is still in the text, only the operators' names are shown.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSource;
use datafusion::physical_plan::{DisplayFormatType, ExecutionPlan};

use crate::site::files::file_scan;

/// What a plan shows in place of a site's files.
pub(crate) const FILES_WITHHELD: &str = "<files withheld>";

/// The plan as `displayable(plan).indent(false)` shows it, but naming
/// none of `files` (see the module documentation).
pub(crate) fn without_files(plan: &Arc<dyn ExecutionPlan>, files: &[PathBuf]) -> String {
    let mut text = String::new();
    let complete = write_nodes(plan, 0, files, &mut text);
    if !complete || names_a_file(&text, files) {
        text.clear();
        write_names(plan, 0, &mut text);
    }
    text
}

/// Writes `node` and its inputs, one indented line each; false if a file
/// scan's line could not be written without its files.
fn write_nodes(
    node: &Arc<dyn ExecutionPlan>,
    depth: usize,
    files: &[PathBuf],
    out: &mut String,
) -> bool {
    let line = match file_scan(node) {
        Some(config) => match scan_without_files(config) {
            Some(rest) => format!("{}: file_groups={FILES_WITHHELD}{rest}", node.name()),
            None => return false,
        },
        None => {
            let mut line = Shown(node.as_ref()).to_string();
            for file in files {
                for form in path_forms(file) {
                    line = line.replace(&form, FILES_WITHHELD);
                }
            }
            line
        }
    };
    out.push_str(&"  ".repeat(depth));
    out.push_str(&line);
    out.push('\n');
    node.children()
        .into_iter()
        .all(|child| write_nodes(child, depth + 1, files, out))
}

/// Only the operators' names, indented.
fn write_names(node: &Arc<dyn ExecutionPlan>, depth: usize, out: &mut String) {
    out.push_str(&"  ".repeat(depth));
    out.push_str(node.name());
    out.push_str(&format!(" ({FILES_WITHHELD})\n"));
    for child in node.children() {
        write_names(child, depth + 1, out);
    }
}

/// A file scan's details after its `file_groups=`: the scan displayed
/// with no files at all, less the display of no files. `None` if
/// DataFusion displays it otherwise than expected.
fn scan_without_files(config: &FileScanConfig) -> Option<String> {
    let mut none = config.clone();
    none.file_groups = Vec::new();
    let text = ShownSource(&none).to_string();
    text.strip_prefix("file_groups={0 groups: []}")
        .map(str::to_string)
}

/// The forms a path of `file` takes in a plan's text, longest first: as
/// the file system writes it, and as an object store names it (no
/// leading `/`).
fn path_forms(file: &Path) -> Vec<String> {
    let full = file.display().to_string();
    let store = full.trim_start_matches('/').to_string();
    [full, store]
        .into_iter()
        .filter(|form| !form.is_empty())
        .collect()
}

/// Whether `text` still names one of `files`: its path (either form), its
/// folder or its name.
fn names_a_file(text: &str, files: &[PathBuf]) -> bool {
    files.iter().any(|file| {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .into_iter();
        let folder = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty() && p != &Path::new("/"))
            .map(path_forms)
            .unwrap_or_default();
        path_forms(file)
            .into_iter()
            .chain(folder)
            .chain(name)
            .any(|form| !form.is_empty() && text.contains(&form))
    })
}

/// One node's line, as DataFusion's default display writes it.
struct Shown<'a>(&'a dyn ExecutionPlan);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_as(DisplayFormatType::Default, f)
    }
}

/// A file scan's details, as its node's line writes them.
struct ShownSource<'a>(&'a FileScanConfig);

impl fmt::Display for ShownSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        DataSource::fmt_as(self.0, DisplayFormatType::Default, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::displayable;
    use datafusion::prelude::{CsvReadOptions, SessionContext};

    /// The physical plan of `sql` over a CSV file at `path` registered as `t`.
    async fn plan_over(path: &Path, sql: &str) -> Arc<dyn ExecutionPlan> {
        let ctx = SessionContext::new();
        ctx.register_csv("t", path.to_str().unwrap(), CsvReadOptions::new())
            .await
            .unwrap();
        ctx.sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn file_scans_show_everything_but_their_files() {
        let dir = tempfile::TempDir::new().unwrap();
        let file = dir.path().join("secret-site-file.csv");
        std::fs::write(&file, "x,y\n1,2\n3,4\n").unwrap();
        let plan = plan_over(&file, "SELECT sum(x) FROM t WHERE y > 2").await;
        let plain = displayable(plan.as_ref()).indent(false).to_string();
        assert!(plain.contains("secret-site-file.csv"), "{plain}");
        let shown = without_files(&plan, std::slice::from_ref(&file));
        assert!(
            shown.contains("DataSourceExec: file_groups=<files withheld>, projection=[x, y]"),
            "{shown}"
        );
        assert!(shown.contains("file_type=csv"), "{shown}");
        let folder = dir.path().display().to_string();
        for secret in [
            folder.as_str(),
            folder.trim_start_matches('/'),
            "secret-site-file",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        // The same operators, line for line, as DataFusion shows them.
        let operators = |text: &str| {
            text.lines()
                .map(|l| l.split(':').next().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(operators(&shown), operators(&plain));
    }

    #[tokio::test]
    async fn a_file_named_in_any_other_way_leaves_only_the_operators_names() {
        let dir = tempfile::TempDir::new().unwrap();
        let file = dir.path().join("t.csv");
        std::fs::write(&file, "x,y\n1,2\n").unwrap();
        let plan = plan_over(&file, "SELECT sum(x) AS \"t.csv\" FROM t").await;
        let shown = without_files(&plan, std::slice::from_ref(&file));
        assert!(!shown.contains("t.csv"), "{shown}");
        assert!(
            shown.contains("AggregateExec (<files withheld>)")
                && shown.contains("DataSourceExec (<files withheld>)"),
            "{shown}"
        );
    }
}
