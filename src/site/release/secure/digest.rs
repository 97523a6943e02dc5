//! The digest of the encoder a site runs in a secure round: part of the
//! view each survivor signs ([`crate::protocol::secure::consistency`]).

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::{TableProvider, source_as_provider};
use datafusion::logical_expr::{Expr, LogicalPlan};
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::protocol::codec::InlineTable;
use crate::protocol::flight::batches_to_ipc;

/// The digest of the encoder a site runs in a secure round: its plan's
/// text with every node's schema (the SQL operators, expressions and
/// types), and — length-prefixed, so that no string can spell out another
/// plan's text (the fourth outside attack made two plans print alike with
/// a string literal) — every node's line, output field names and types,
/// every literal's type and value (as Arrow IPC bytes), every scan's table
/// name, the rows of every table inlined in the plan (shared tables a
/// worker was sent), and what a join or unnest node does that its line
/// does not print (a join's null equality and constraint, an unnest's
/// options). Every site of an honest round runs the same encoder;
/// a coordinator that sends one site the analyst's query and the others
/// one that adds nothing to the total (`WHERE false`, a join with no rows)
/// gives that site a view no other site signs.
pub fn encoder_digest(plan: &LogicalPlan) -> Result<[u8; 32]> {
    let mut parts: Vec<Vec<u8>> = vec![plan.display_indent_schema().to_string().into_bytes()];
    plan.apply_with_subqueries(|node| {
        parts.push(node.display().to_string().into_bytes());
        for field in node.schema().fields() {
            parts.push(field.name().as_bytes().to_vec());
            parts.push(field.data_type().to_string().into_bytes());
        }
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::Literal(value, _) = e {
                    parts.push(value.data_type().to_string().into_bytes());
                    parts.push(literal_bytes(value)?);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        // What a node does that its line does not show (the fifth outside
        // attack: `IS NOT DISTINCT FROM` and `=` print alike in a join).
        match node {
            LogicalPlan::Join(join) => parts.push(
                format!(
                    "join {:?} {:?} null_aware={}",
                    join.null_equality, join.join_constraint, join.null_aware
                )
                .into_bytes(),
            ),
            LogicalPlan::Unnest(unnest) => parts.push(
                format!(
                    "unnest {:?} {:?} {:?} {:?}",
                    unnest.exec_columns,
                    unnest.list_type_columns,
                    unnest.struct_type_columns,
                    unnest.options
                )
                .into_bytes(),
            ),
            _ => {}
        }
        if let LogicalPlan::TableScan(scan) = node {
            parts.push(scan.table_name.to_string().into_bytes());
            if let Ok(provider) = source_as_provider(&scan.source)
                && let Some(table) = provider.downcast_ref::<InlineTable>()
            {
                parts.push(batches_to_ipc(&table.schema(), table.batches())?);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let mut hash = Sha256::new();
    hash.update(b"fedsql secure aggregation v3: encoder");
    hash.update((parts.len() as u64).to_be_bytes());
    for part in &parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    Ok(hash.finalize().into())
}

/// A literal's value as Arrow IPC bytes (one row of its type).
fn literal_bytes(value: &ScalarValue) -> datafusion::error::Result<Vec<u8>> {
    let array = value.to_array()?;
    let schema = Schema::new(vec![Field::new("v", array.data_type().clone(), true)]);
    let batch = RecordBatch::try_new(Arc::new(schema.clone()), vec![array])?;
    Ok(batches_to_ipc(&schema, &[batch])?)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::DataType;
    use datafusion::datasource::provider_as_source;
    use datafusion::logical_expr::{LogicalPlanBuilder, col, lit};

    use super::*;

    /// A filter over a shared table of `values` inlined in the plan.
    fn plan(values: &[i64], above: i64) -> LogicalPlan {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(values.to_vec()))],
        )
        .unwrap();
        let table = Arc::new(InlineTable::new(schema, vec![batch]));
        LogicalPlanBuilder::scan("s", provider_as_source(table), None)
            .unwrap()
            .filter(col("x").gt(lit(above)))
            .unwrap()
            .build()
            .unwrap()
    }

    #[test]
    fn a_joins_null_equality_changes_the_digest_though_it_prints_alike() {
        use datafusion::common::NullEquality;
        use datafusion::logical_expr::JoinType;
        let join = |nulls: NullEquality| {
            LogicalPlanBuilder::from(plan(&[1, 2], 0))
                .join_detailed(
                    LogicalPlanBuilder::from(plan(&[1, 3], 0))
                        .alias("r")
                        .unwrap()
                        .build()
                        .unwrap(),
                    JoinType::Inner,
                    (vec!["s.x"], vec!["r.x"]),
                    None,
                    nulls,
                )
                .unwrap()
                .build()
                .unwrap()
        };
        let (a, b) = (
            join(NullEquality::NullEqualsNull),
            join(NullEquality::NullEqualsNothing),
        );
        assert_eq!(
            a.display_indent().to_string(),
            b.display_indent().to_string()
        );
        assert_ne!(encoder_digest(&a).unwrap(), encoder_digest(&b).unwrap());
    }

    #[test]
    fn the_digest_changes_with_the_query_and_with_the_inlined_rows() {
        let digest = |values: &[i64], above| encoder_digest(&plan(values, above)).unwrap();
        assert_eq!(digest(&[1, 2], 0), digest(&[1, 2], 0));
        assert_ne!(digest(&[1, 2], 0), digest(&[1, 2], 1));
        assert_ne!(digest(&[1, 2], 0), digest(&[1, 3], 0));
    }
}
