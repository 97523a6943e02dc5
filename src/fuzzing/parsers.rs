//! The analyst's text that fedsql reads itself (DataFusion reads the
//! rest of SQL): model formulas in R's syntax, and fedsql's own
//! statements (`CREATE FEDERATED TABLE`, `EXPLAIN FEDERATED`, `SHOW
//! CLIENTS`, `SHOW PRIVACY BUDGET`) with their worker URLs and options.

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::common::text;
use crate::coordinator::ddl::{ClientList, parse_create_federated};
use crate::coordinator::fed_statement::{FedStatement, recognise};
use crate::coordinator::worker_url::{
    WorkerUrl, check_option_keys, is_url, secure_threshold_option,
};
use crate::error::{FedError, Result};
use crate::formula::{Formula, Levels, design_columns, split_random_terms};

/// A model formula (with lme4's random terms), over a table of two
/// numbers, a count, a flag and two text columns: parsed, `.` expanded,
/// its design columns made, and each column's SQL read back by the SQL
/// parser the clients use.
pub fn formula(data: &[u8]) -> Result<()> {
    let text = text(data)?;
    let (fixed, _random) = split_random_terms(text)?;
    let schema = Schema::new(vec![
        Field::new("y", DataType::Float64, true),
        Field::new("x", DataType::Float64, true),
        Field::new("n", DataType::Int64, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("g", DataType::Utf8, true),
        Field::new("region name", DataType::Utf8, true),
    ]);
    let formula = Formula::parse(&fixed)?.expand_dot(&schema);
    let _ = formula.columns();
    let levels: Levels = formula
        .factors(&schema)?
        .into_iter()
        .map(|column| {
            let values = ["a", "b", "c"]
                .into_iter()
                .map(|v| ScalarValue::Utf8(Some(v.to_string())))
                .collect();
            (column, values)
        })
        .collect();
    for column in design_columns(&formula, &schema, &levels)? {
        let _ = (&column.name, &column.r_name);
        Parser::new(&GenericDialect {})
            .try_with_sql(&column.sql)
            .and_then(|mut parser| parser.parse_expr())
            .map_err(|e| {
                FedError::Syntax(format!(
                    "design column `{}`: its SQL `{}` does not parse: {e}",
                    column.name, column.sql
                ))
            })?;
    }
    Ok(())
}

/// One statement as the coordinator dispatches it: recognised as
/// fedsql's or not, and fedsql's `CREATE FEDERATED TABLE` parsed, its
/// option keys checked and its worker URLs read.
pub fn fed_statement(data: &[u8]) -> Result<()> {
    let sql = text(data)?;
    match recognise(sql) {
        Some(FedStatement::CreateFederatedTable) => {
            let create = parse_create_federated(sql)?;
            let clients: Vec<&str> = match &create.clients {
                ClientList::Location(_) => Vec::new(),
                ClientList::Named(named) => named.iter().map(|(n, _)| n.as_str()).collect(),
            };
            check_option_keys(&create.options, &clients)?;
            secure_threshold_option(&create.options)?;
            if let ClientList::Named(named) = &create.clients {
                for (_, location) in named {
                    let location = location.to_string_lossy();
                    if is_url(&location) {
                        WorkerUrl::parse(&location, &create.name)?;
                    }
                }
            }
            Ok(())
        }
        Some(FedStatement::ExplainFederated { statement, .. }) => {
            // The explained statement is dispatched again.
            fed_statement(statement.as_bytes())
        }
        Some(FedStatement::ShowClients { table } | FedStatement::ShowPrivacyBudget { table }) => {
            if table.is_empty() {
                Err(FedError::Syntax("no table named".into()))
            } else {
                Ok(())
            }
        }
        None => Err(FedError::Syntax("not one of fedsql's statements".into())),
    }
}
