//! Where a session keeps the documentation of the functions fedsql adds,
//! and how it is asked.
//!
//! An aggregate carries its own (DataFusion's `documentation()`, built from
//! the [`FunctionDoc`] that `fedsql_udfs::catalogue` keeps beside its other
//! facts). DataFusion's table functions carry none, so fedsql registers
//! each one wrapped with its [`FunctionDoc`]
//! ([`register_table_function`]): the documentation lives in the session's
//! registry of table functions, where the function does, and every listing
//! (`information_schema`, `SHOW FUNCTIONS`, `\h`, the reference page) reads
//! it from there.

use std::any::Any;
use std::sync::Arc;

use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::Result;
use datafusion::execution::SessionState;
use datafusion::logical_expr::Documentation;
use datafusion::prelude::SessionContext;
use fedsql_udfs::catalogue;
use fedsql_udfs::function_doc::FunctionDoc;

/// A table function and its documentation: what fedsql registers, so that
/// the documentation is found where the function is.
#[derive(Debug)]
struct DocumentedTableFunction {
    doc: &'static FunctionDoc,
    function: Arc<dyn TableFunctionImpl>,
}

impl TableFunctionImpl for DocumentedTableFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        self.function.call_with_args(args)
    }
}

/// Registers table function `name` with its documentation.
pub(crate) fn register_table_function(
    ctx: &SessionContext,
    name: &str,
    doc: &'static FunctionDoc,
    function: impl TableFunctionImpl + 'static,
) {
    ctx.register_udtf(
        name,
        Arc::new(DocumentedTableFunction {
            doc,
            function: Arc::new(function),
        }),
    );
}

/// The documentation of a registered table function, if fedsql registered
/// it with one.
pub(crate) fn table_function_doc(
    function: &datafusion::catalog::TableFunction,
) -> Option<&'static FunctionDoc> {
    let function: &dyn Any = function.function().as_ref();
    function
        .downcast_ref::<DocumentedTableFunction>()
        .map(|f| f.doc)
}

/// What kind of function fedsql added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum FunctionKind {
    /// A table function (`SELECT * FROM f(...)`).
    Table,
    /// An aggregate (`SELECT f(x) FROM t`).
    Aggregate,
}

/// One function fedsql adds, with its documentation.
#[derive(Debug, Clone)]
pub(crate) struct DocumentedFunction {
    /// Its name, as SQL calls it.
    pub(crate) name: String,
    /// Aggregate or table function.
    pub(crate) kind: FunctionKind,
    /// Its documentation.
    pub(crate) doc: &'static FunctionDoc,
    /// For an aggregate, what the site catalogue says it releases.
    pub(crate) facts: Vec<String>,
}

impl DocumentedFunction {
    /// Its section of the reference page.
    #[cfg(test)]
    pub(crate) fn markdown(&self) -> String {
        self.doc.markdown(&self.name, &self.facts)
    }

    /// What `\h NAME` prints.
    pub(crate) fn text(&self) -> String {
        self.doc.text(&self.name, &self.facts)
    }
}

/// Every function fedsql adds to a session, with its documentation, by
/// family and then name: the aggregates the site catalogue documents and
/// the documented table functions.
pub(crate) fn documented_functions(state: &SessionState) -> Vec<DocumentedFunction> {
    let aggregates = state.aggregate_functions().keys().filter_map(|name| {
        let facts = catalogue::aggregate(name)?;
        Some(DocumentedFunction {
            name: name.clone(),
            kind: FunctionKind::Aggregate,
            doc: facts.doc?,
            facts: facts.release_facts(),
        })
    });
    let tables = state.table_functions().iter().filter_map(|(name, f)| {
        Some(DocumentedFunction {
            name: name.clone(),
            kind: FunctionKind::Table,
            doc: table_function_doc(f)?,
            facts: Vec::new(),
        })
    });
    let mut functions: Vec<DocumentedFunction> = aggregates.chain(tables).collect();
    functions.sort_by(|a, b| (a.doc.family, a.kind, &a.name).cmp(&(b.doc.family, b.kind, &b.name)));
    functions
}

/// The function reference, `docs/reference/functions.md`: one section per
/// family, one subsection per function (written and checked by a test).
#[cfg(test)]
pub(crate) fn reference_markdown(state: &SessionState) -> String {
    use fedsql_udfs::function_doc::FunctionFamily;
    let functions = documented_functions(state);
    let mut page = String::from(
        "# SQL functions\n\n\
         Every SQL function fedsql adds to DataFusion's: its aggregates (`SELECT f(x) FROM t`) and its \
         table functions (`SELECT * FROM f(...)`), with their arguments, options and defaults, what \
         they return, and what leaves each site when they run. `SHOW FUNCTIONS` lists the same \
         functions with their descriptions (`SHOW FUNCTIONS LIKE 'glm%'`), and `\\h NAME` in the \
         REPL prints one of these sections. Which functions a site runs at all, DataFusion's \
         included, is [the site catalogue](site-functions.md).\n\n\
         This page is generated from the functions' own documentation; after changing one, run \
         `FEDSQL_BLESS=1 cargo test --lib -p fedsql function_reference`.\n\n",
    );
    for family in FunctionFamily::ALL {
        let names: Vec<String> = functions
            .iter()
            .filter(|f| f.doc.family == family)
            .map(|f| format!("[`{0}`](#{0})", f.name))
            .collect();
        if !names.is_empty() {
            page.push_str(&format!("- {}: {}\n", family.label(), names.join(", ")));
        }
    }
    for family in FunctionFamily::ALL {
        let members: Vec<&DocumentedFunction> = functions
            .iter()
            .filter(|f| f.doc.family == family)
            .collect();
        if members.is_empty() {
            continue;
        }
        while page.ends_with("\n\n") {
            page.pop();
        }
        page.push_str(&format!(
            "\n## {}\n\n{}\n\n",
            family.label(),
            family.about()
        ));
        for f in members {
            page.push_str(&f.markdown());
        }
    }
    while page.ends_with("\n\n") {
        page.pop();
    }
    page
}

/// What `\h NAME` prints for any function of the session: fedsql's own
/// documentation, or DataFusion's for its built-in functions; `None` for
/// a name the session does not know.
pub(crate) fn help_text(state: &SessionState, name: &str) -> Option<String> {
    let name = name.trim().to_ascii_lowercase();
    if let Some(f) = documented_functions(state)
        .into_iter()
        .find(|f| f.name == name)
    {
        return Some(f.text());
    }
    let documentation = state
        .scalar_functions()
        .get(&name)
        .and_then(|f| f.documentation())
        .or_else(|| {
            state
                .aggregate_functions()
                .get(&name)
                .and_then(|f| f.documentation())
        })
        .or_else(|| {
            state
                .window_functions()
                .get(&name)
                .and_then(|f| f.documentation())
        });
    match documentation {
        Some(documentation) => Some(datafusion_text(&name, documentation)),
        None if state.table_functions().contains_key(&name)
            || state.scalar_functions().contains_key(&name)
            || state.aggregate_functions().contains_key(&name)
            || state.window_functions().contains_key(&name) =>
        {
            Some(format!("{name}: no documentation\n"))
        }
        None => None,
    }
}

/// A DataFusion function's documentation as `\h` prints it.
fn datafusion_text(name: &str, documentation: &Documentation) -> String {
    let mut text = format!(
        "{name}: {}\n\nSyntax: {}\n",
        documentation.description, documentation.syntax_example
    );
    if let Some(arguments) = &documentation.arguments {
        text.push_str("\nArguments:\n");
        let width = arguments.iter().map(|(a, _)| a.len()).max().unwrap_or(0);
        for (argument, about) in arguments {
            let about = about.split_whitespace().collect::<Vec<_>>().join(" ");
            text.push_str(&format!("  {argument:width$}  {about}\n"));
        }
    }
    if let Some(example) = &documentation.sql_example {
        text.push_str(&format!("\nExample:\n{}\n", example.trim_end()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FedContext;

    #[test]
    fn the_function_reference_is_current() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/functions.md");
        let page = reference_markdown(&FedContext::new().session().state());
        if std::env::var_os("FEDSQL_BLESS").is_some() {
            std::fs::write(&path, &page).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == page,
            "{} is not current: run FEDSQL_BLESS=1 cargo test --lib -p fedsql function_reference",
            path.display()
        );
    }

    #[test]
    fn every_table_function_and_fedsql_aggregate_is_documented() {
        let state = FedContext::new().session().state();
        let documented: Vec<String> = documented_functions(&state)
            .into_iter()
            .map(|f| f.name)
            .collect();
        let datafusion: Vec<String> = datafusion::functions_table::all_default_table_functions()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        for name in state
            .table_functions()
            .keys()
            .filter(|n| !datafusion.contains(n))
        {
            assert!(
                documented.contains(name),
                "table function {name} has no documentation"
            );
        }
        for f in fedsql_udfs::all() {
            assert!(
                documented.iter().any(|d| d == f.name()),
                "{} has no documentation",
                f.name()
            );
        }
    }

    #[test]
    fn help_prints_fedsql_and_datafusion_functions() {
        let state = FedContext::new().session().state();
        let glm = help_text(&state, "GLM").unwrap();
        assert!(glm.starts_with("glm: "), "{glm}");
        assert!(
            glm.contains("maxit") && glm.contains("Leaves each site"),
            "{glm}"
        );
        let dp = help_text(&state, "dp_count").unwrap();
        assert!(dp.contains("debits") || dp.contains("debiting"), "{dp}");
        assert!(help_text(&state, "sum").unwrap().starts_with("sum: "));
        assert!(help_text(&state, "no_such_function").is_none());
    }
}
