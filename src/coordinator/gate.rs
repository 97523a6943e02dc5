//! The statement gate: what a session of `fedsql serve` without
//! `--allow-ddl` may run.
//!
//! Such a server lets its connections ask questions, not change what the
//! server reads, writes or serves. The gate is a session extension that
//! [`FedContext::sql`](crate::FedContext::sql) consults, and it decides from
//! what is about to run, never from the statement's text: DataFusion's
//! logical plan, built by the session's own parser and dialect (so a
//! comment hint `/*!COPY*/` or a `q'[…]'` quote means to the gate what it
//! means to the executor), or fedsql's own statement dispatch. The plan is
//! walked whole — `EXPLAIN`, `EXPLAIN ANALYZE` and `PREPARE` wrap plans, and
//! subqueries hold plans — and it is refused if any node is a `COPY`, DDL
//! (`CREATE` / `DROP` of tables, external tables, views, schemas,
//! functions, indexes), DML (`INSERT`, `UPDATE`, `DELETE`, `TRUNCATE`,
//! `MERGE`), or a `SET` of a setting outside those that name no file
//! ([`SETTABLE_PREFIXES`]). `CREATE FEDERATED TABLE` is DDL whose `OPTIONS`
//! name token files, certificates, paths and URLs: it is refused whole, so
//! a connection names no file at all. A statement that cannot be parsed
//! fails at parsing, and so never runs.

use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, Statement, WriteOp};

use crate::error::{FedError, Result};

/// Settings a gated session may `SET` (lower case prefixes): none of them
/// names a file, a directory or a URL. `datafusion.runtime.*` (the spill
/// directory) and `datafusion.catalog.*` (a default catalog's location) do,
/// and are refused.
pub(crate) const SETTABLE_PREFIXES: &[&str] = &[
    "datafusion.execution.",
    "datafusion.optimizer.",
    "datafusion.explain.",
    "datafusion.sql_parser.",
    "datafusion.format.",
    "fedsql.",
];

/// The gate of a session that may not change the catalog nor name files
/// (`fedsql serve` without `--allow-ddl`), kept in the session's config:
/// every context made from the session's state carries it, so the
/// statements a statement runs in turn (`EXPLAIN ANALYZE FEDERATED`, a
/// model's rounds) pass the same gate.
#[derive(Debug, Default)]
pub(crate) struct StatementGate {
    _private: (),
}

impl StatementGate {
    /// The gate of a server started without `--allow-ddl`.
    pub(crate) fn without_ddl() -> Arc<Self> {
        Arc::new(Self { _private: () })
    }

    /// The gate of a session, if it has one.
    pub(crate) fn of(state: &SessionState) -> Option<Arc<Self>> {
        state.config().get_extension::<Self>()
    }

    /// Refuses a statement of fedsql's own that defines a table.
    pub(crate) fn refuse_create_federated(&self) -> FedError {
        refusal("CREATE FEDERATED TABLE")
    }

    /// Refuses a plan that holds, anywhere, a COPY, DDL, DML or a `SET`
    /// of a setting that may name a file.
    pub(crate) fn check_plan(&self, plan: &LogicalPlan) -> Result<()> {
        let mut refused = None;
        plan.apply_with_subqueries(|node| {
            refused = forbidden(node);
            Ok(if refused.is_some() {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        })?;
        match refused {
            Some(what) => Err(refusal(&what)),
            None => Ok(()),
        }
    }
}

/// What a gated session may not run of one plan node, as SQL names it.
fn forbidden(node: &LogicalPlan) -> Option<String> {
    let what = match node {
        LogicalPlan::Copy(_) => "COPY",
        LogicalPlan::Ddl(ddl) => match ddl {
            DdlStatement::CreateExternalTable(_) => "CREATE EXTERNAL TABLE",
            DdlStatement::CreateMemoryTable(_) => "CREATE TABLE",
            DdlStatement::CreateView(_) => "CREATE VIEW",
            DdlStatement::CreateCatalogSchema(_) => "CREATE SCHEMA",
            DdlStatement::CreateCatalog(_) => "CREATE DATABASE",
            DdlStatement::CreateIndex(_) => "CREATE INDEX",
            DdlStatement::DropTable(_) => "DROP TABLE",
            DdlStatement::DropView(_) => "DROP VIEW",
            DdlStatement::DropCatalogSchema(_) => "DROP SCHEMA",
            DdlStatement::CreateFunction(_) => "CREATE FUNCTION",
            DdlStatement::DropFunction(_) => "DROP FUNCTION",
        },
        LogicalPlan::Dml(dml) => match dml.op {
            WriteOp::Insert(_) => "INSERT",
            WriteOp::Delete => "DELETE",
            WriteOp::Update => "UPDATE",
            WriteOp::Ctas => "CREATE TABLE AS",
            WriteOp::Truncate => "TRUNCATE",
            WriteOp::MergeInto(_) => "MERGE",
            // Any other write a later DataFusion adds is a write too.
            _ => "a data change",
        },
        LogicalPlan::Statement(Statement::SetVariable(set)) if !settable(&set.variable) => {
            return Some(format!("SET {}", set.variable));
        }
        LogicalPlan::Statement(Statement::ResetVariable(reset)) if !settable(&reset.variable) => {
            return Some(format!("RESET {}", reset.variable));
        }
        _ => return None,
    };
    Some(what.to_string())
}

/// Whether a gated session may set `variable`.
fn settable(variable: &str) -> bool {
    let variable = variable.trim().to_ascii_lowercase();
    SETTABLE_PREFIXES.iter().any(|p| variable.starts_with(p))
}

fn refusal(what: &str) -> FedError {
    FedError::refused(
        format!(
            "`{what}` statements are not accepted by this server: it was started without --allow-ddl"
        ),
        Some(
            "tables are registered by the server's setup scripts (fedsql serve -f setup.sql); \
             start it with --allow-ddl to let connections create and drop tables, copy, and name files",
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FedContext;

    /// A context whose session is gated, over the demo table and a shared one.
    async fn gated() -> FedContext {
        let ctx = FedContext::new();
        crate::frontend::demo::register_demo(&ctx).unwrap();
        ctx.sql("CREATE TABLE shared AS VALUES (1), (2)")
            .await
            .unwrap();
        let mut state = ctx.session().state();
        state
            .config_mut()
            .set_extension(StatementGate::without_ddl());
        FedContext::from_state(state)
    }

    async fn refused(ctx: &FedContext, sql: &str) -> String {
        match ctx.sql(sql).await {
            Err(e @ FedError::Refused { .. }) => e.to_string(),
            Err(e) => panic!("{sql}: refused with the wrong error: {e}"),
            Ok(_) => panic!("{sql}: not refused"),
        }
    }

    #[tokio::test]
    async fn plans_that_write_define_or_name_files_are_refused_wherever_they_hide() {
        let ctx = gated().await;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.csv");
        let out = out.display();
        for (sql, what) in [
            (format!("COPY (SELECT 1) TO '{out}'"), "COPY"),
            (format!("EXPLAIN COPY (SELECT 1) TO '{out}'"), "COPY"),
            (format!("EXPLAIN ANALYZE COPY (SELECT 1) TO '{out}'"), "COPY"),
            (format!("EXPLAIN ANALYZE COPY shared TO '{out}'"), "COPY"),
            // A MySQL comment hint is code to the generic dialect.
            (format!("/*!COPY*/ (SELECT 1) TO '{out}'"), "COPY"),
            (format!("/*! COPY (SELECT 1) TO '{out}' */"), "COPY"),
            ("DROP TABLE shared".into(), "DROP TABLE"),
            ("EXPLAIN DROP TABLE shared".into(), "DROP TABLE"),
            ("/*!DROP*/ TABLE clinic".into(), "DROP TABLE"),
            (
                "CREATE EXTERNAL TABLE p STORED AS CSV LOCATION '/etc/passwd'".into(),
                "CREATE EXTERNAL TABLE",
            ),
            ("CREATE VIEW v AS SELECT 1".into(), "CREATE VIEW"),
            ("CREATE TABLE c AS SELECT 1".into(), "CREATE TABLE"),
            ("INSERT INTO shared VALUES (3)".into(), "INSERT"),
            ("PREPARE p AS INSERT INTO shared VALUES (3)".into(), "INSERT"),
            (
                "SET datafusion.runtime.temp_directory = '/tmp/x'".into(),
                "SET datafusion.runtime.temp_directory",
            ),
            (
                "SET datafusion.catalog.location = '/etc'".into(),
                "SET datafusion.catalog.location",
            ),
            (
                "CREATE FEDERATED TABLE t CLIENTS ('a' = 'grpc://127.0.0.1:1/t') OPTIONS ('token_file' '/etc/passwd')".into(),
                "CREATE FEDERATED TABLE",
            ),
            (
                format!("EXPLAIN ANALYZE FEDERATED COPY (SELECT count(*) FROM clinic) TO '{out}'"),
                "COPY",
            ),
            (
                "EXPLAIN ANALYZE FEDERATED CREATE FEDERATED TABLE t LOCATION '/etc/'".into(),
                "CREATE FEDERATED TABLE",
            ),
            ("EXPLAIN FEDERATED DROP TABLE clinic".into(), "DROP TABLE"),
        ] {
            let message = refused(&ctx, &sql).await;
            assert!(message.contains(&format!("`{what}`")), "{sql}: {message}");
            assert!(message.contains("--allow-ddl"), "{sql}: {message}");
        }
        assert!(!dir.path().join("out.csv").exists());
        // Nothing was dropped or added.
        assert_eq!(table_names(&ctx).await, ["clinic", "shared"]);
    }

    /// The tables the session has.
    async fn table_names(ctx: &FedContext) -> Vec<String> {
        ctx.tables()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect()
    }

    #[tokio::test]
    async fn what_the_parser_cannot_read_is_not_run() {
        let ctx = gated().await;
        // Unbalanced Oracle-style quote: an error, never a pass.
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.csv");
        // A quote the PostgreSQL tokenizer reads as unbalanced, which the
        // generic dialect reads and DataFusion cannot plan.
        let quoted = format!("COPY (SELECT q'[it's]' AS x) TO '{}'", out.display());
        for sql in [
            quoted.as_str(),
            "SELECT q'[abc' FROM clinic; DROP TABLE clinic",
            "DROP TABLE clinic; SELECT 1",
            "/*!DROP TABLE clinic",
        ] {
            assert!(ctx.sql(sql).await.is_err(), "{sql}");
        }
        assert!(!out.exists());
        assert_eq!(table_names(&ctx).await, ["clinic", "shared"]);
    }

    #[tokio::test]
    async fn questions_and_session_settings_still_run() {
        let ctx = gated().await;
        for sql in [
            "SELECT count(*) AS n FROM clinic",
            "EXPLAIN SELECT count(*) FROM clinic",
            "EXPLAIN FEDERATED SELECT count(*) FROM clinic",
            "SELECT * FROM shared",
            "SHOW TABLES",
            "SHOW CLIENTS clinic",
            "SET datafusion.execution.batch_size = 1024",
            "SET fedsql.dp_epsilon = 0.5",
            "SELECT * FROM information_schema.tables",
        ] {
            ctx.sql(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .collect()
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
}
