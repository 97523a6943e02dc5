//! What PostgreSQL clients ask before they ask for data: `pg_catalog`,
//! `information_schema`, `version()` and the functions psql's `\d`, R's
//! `dbListTables`, DBeaver's navigator and SQLAlchemy's reflection use.
//!
//! `datafusion-pg-catalog` provides the `pg_catalog` tables (built from the
//! catalog: every federated and shared table is a relation of kind `r`,
//! with its columns in `pg_attribute`) and the PostgreSQL functions;
//! DataFusion's own `information_schema` lists the same tables. Catalog
//! queries are written in PostgreSQL's dialect (`OPERATOR(pg_catalog.~)`,
//! `COLLATE`, `'t'::regclass`, unqualified `pg_class`), which
//! [`compat_rewrite`] turns into SQL DataFusion plans; the rewritten text
//! then runs through [`FedContext::sql`](crate::FedContext::sql) like any
//! other statement.

use std::sync::LazyLock;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};

/// The PostgreSQL version fedsql answers as (what drivers parse from
/// `version()` and the `server_version` parameter).
pub(crate) const SERVER_VERSION: &str = "16.6";

/// Adds `pg_catalog` and the PostgreSQL functions to a server's context.
pub(crate) fn install(ctx: &FedContext) -> Result<()> {
    datafusion_pg_catalog::setup_pg_catalog(ctx.session(), "datafusion", EmptyContextProvider)
        .map_err(|e| FedError::from(*e))?;
    ctx.session().register_udf(ScalarUDF::from(Version::new()));
    Ok(())
}

/// The text of `version()`: "PostgreSQL 16.6 ..." as drivers expect, then
/// what really answers.
pub(crate) fn version_text() -> String {
    format!(
        "PostgreSQL {SERVER_VERSION} (fedsql {} on DataFusion {}), federated: only aggregate states leave a client",
        env!("CARGO_PKG_VERSION"),
        datafusion::DATAFUSION_VERSION
    )
}

static PARSER: LazyLock<PostgresCompatibilityParser> =
    LazyLock::new(PostgresCompatibilityParser::new);

/// Whether a statement looks at the catalog in PostgreSQL's dialect.
pub(crate) fn is_catalog_query(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    [
        "pg_",
        "information_schema",
        "operator(",
        "::reg",
        "current_user",
        " collate ",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
}

/// A catalog query rewritten into SQL DataFusion plans; `None` if the
/// PostgreSQL parser cannot read it (it then runs as written).
pub(crate) fn compat_rewrite(sql: &str) -> Option<String> {
    let statements = PARSER.parse(sql).ok()?;
    match statements.as_slice() {
        [statement] => Some(statement.to_string()),
        _ => None,
    }
}

/// `version()`, as PostgreSQL answers it.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Version {
    signature: Signature,
}

impl Version {
    fn new() -> Self {
        Self {
            signature: Signature::nullary(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Version {
    fn name(&self) -> &str {
        "version"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
            version_text(),
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psql_operator_syntax_is_rewritten() {
        let sql = "SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname OPERATOR(pg_catalog.~) '^(clinic)$' COLLATE pg_catalog.default";
        assert!(is_catalog_query(sql));
        let rewritten = compat_rewrite(sql).unwrap();
        assert!(!rewritten.contains("OPERATOR"), "{rewritten}");
        assert!(!is_catalog_query("SELECT avg(age) FROM clinic"));
    }

    #[test]
    fn version_reads_as_postgres() {
        assert!(version_text().starts_with("PostgreSQL 16."));
    }
}
