//! What PostgreSQL clients ask before they ask for data: `pg_catalog`,
//! `information_schema`, `version()`, `to_regtype()` and the functions
//! psql's `\d`, R's `dbListTables`, DBeaver's navigator, psycopg's
//! `TypeInfo.fetch` and SQLAlchemy's reflection use.
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
    ctx.session()
        .register_udf(ScalarUDF::from(ToRegtype::new()));
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

/// The OIDs of PostgreSQL's built-in types, by the names `to_regtype`
/// accepts (the `pg_type` names and their SQL spellings). `[]` or a
/// leading `_` names the array type.
const TYPE_OIDS: &[(&str, i32, i32)] = &[
    // (name, oid, array oid)
    ("bool", 16, 1000),
    ("boolean", 16, 1000),
    ("bytea", 17, 1001),
    ("char", 18, 1002),
    ("name", 19, 1003),
    ("int8", 20, 1016),
    ("bigint", 20, 1016),
    ("int2", 21, 1005),
    ("smallint", 21, 1005),
    ("int4", 23, 1007),
    ("integer", 23, 1007),
    ("int", 23, 1007),
    ("regproc", 24, 1008),
    ("text", 25, 1009),
    ("oid", 26, 1028),
    ("json", 114, 199),
    ("xml", 142, 143),
    ("float4", 700, 1021),
    ("real", 700, 1021),
    ("float8", 701, 1022),
    ("double precision", 701, 1022),
    ("bpchar", 1042, 1014),
    ("character", 1042, 1014),
    ("varchar", 1043, 1015),
    ("character varying", 1043, 1015),
    ("date", 1082, 1182),
    ("time", 1083, 1183),
    ("time without time zone", 1083, 1183),
    ("timestamp", 1114, 1115),
    ("timestamp without time zone", 1114, 1115),
    ("timestamptz", 1184, 1185),
    ("timestamp with time zone", 1184, 1185),
    ("interval", 1186, 1187),
    ("timetz", 1266, 1270),
    ("time with time zone", 1266, 1270),
    ("numeric", 1700, 1231),
    ("decimal", 1700, 1231),
    ("regclass", 2205, 2210),
    ("regtype", 2206, 2211),
    ("uuid", 2950, 2951),
    ("jsonb", 3802, 3807),
];

/// The OID of a built-in type named `name`, as PostgreSQL's `to_regtype`
/// resolves it (`None` for a type this server does not have, such as
/// `hstore`).
fn type_oid(name: &str) -> Option<i32> {
    let name = name.trim().to_ascii_lowercase();
    let name = name.strip_prefix("pg_catalog.").unwrap_or(&name).trim();
    let name = name.trim_matches('"');
    let (base, array) = match (name.strip_suffix("[]"), name.strip_prefix('_')) {
        (Some(base), _) | (None, Some(base)) => (base.trim(), true),
        (None, None) => (name, false),
    };
    TYPE_OIDS
        .iter()
        .find(|(known, ..)| *known == base)
        .map(|&(_, oid, array_oid)| if array { array_oid } else { oid })
}

/// `to_regtype(text)`: a type's OID, or NULL if there is no such type —
/// what psycopg's `TypeInfo.fetch` (and so SQLAlchemy's psycopg dialect,
/// looking for `hstore` when it connects) asks.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ToRegtype {
    signature: Signature,
}

impl ToRegtype {
    fn new() -> Self {
        Self {
            signature: Signature::exact(vec![DataType::Utf8], Volatility::Stable),
        }
    }
}

impl ScalarUDFImpl for ToRegtype {
    fn name(&self) -> &str {
        "to_regtype"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        use datafusion::arrow::array::{Array, Int32Array, StringArray};
        let [name] = args.args.as_slice() else {
            return datafusion::common::exec_err!("to_regtype takes one argument");
        };
        match name {
            ColumnarValue::Scalar(scalar) => {
                let oid = match scalar {
                    ScalarValue::Utf8(name) => name.as_deref().and_then(type_oid),
                    _ => None,
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Int32(oid)))
            }
            ColumnarValue::Array(array) => {
                let names = array
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .ok_or_else(|| {
                        datafusion::error::DataFusionError::Execution(
                            "to_regtype takes a text argument".into(),
                        )
                    })?;
                let oids: Int32Array = names.iter().map(|n| n.and_then(type_oid)).collect();
                Ok(ColumnarValue::Array(std::sync::Arc::new(oids)))
            }
        }
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
    fn to_regtype_knows_the_built_in_types() {
        assert_eq!(type_oid("int4"), Some(23));
        assert_eq!(type_oid("Double Precision"), Some(701));
        assert_eq!(type_oid("pg_catalog.text"), Some(25));
        assert_eq!(type_oid("text[]"), Some(1009));
        assert_eq!(type_oid("_int8"), Some(1016));
        assert_eq!(type_oid("hstore"), None);
    }

    #[test]
    fn version_reads_as_postgres() {
        assert!(version_text().starts_with("PostgreSQL 16."));
    }
}
