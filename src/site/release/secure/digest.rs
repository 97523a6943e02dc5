//! The digest of the encoder a site runs in a secure round: part of the
//! view each survivor signs ([`crate::protocol::secure::consistency`]).

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::{TableProvider, source_as_provider};
use datafusion::logical_expr::LogicalPlan;
use sha2::{Digest, Sha256};

use crate::error::{FedError, Result};
use crate::protocol::codec::InlineTable;
use crate::protocol::flight::batches_to_ipc;

/// The digest of the encoder a site runs in a secure round: its plan's
/// text with every node's schema (the SQL operators, expressions, literals
/// and types) and the rows of every table inlined in it (shared tables a
/// worker was sent). Every site of an honest round runs the same encoder;
/// a coordinator that sends one site the analyst's query and the others
/// one that adds nothing to the total (`WHERE false`, a join with no
/// rows) gives that site a view no other site signs.
pub(crate) fn encoder_digest(plan: &LogicalPlan) -> Result<[u8; 32]> {
    let mut hash = Sha256::new();
    hash.update(b"fedsql secure aggregation v3: encoder");
    let text = plan.display_indent_schema().to_string();
    hash.update((text.len() as u64).to_be_bytes());
    hash.update(text.as_bytes());
    let mut inline = Vec::new();
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && let Ok(provider) = source_as_provider(&scan.source)
            && let Some(table) = provider.downcast_ref::<InlineTable>()
        {
            inline.push((
                scan.table_name.to_string(),
                table.schema(),
                table.batches().to_vec(),
            ));
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    for (name, schema, batches) in inline {
        let bytes = batches_to_ipc(&schema, &batches)
            .map_err(|e| FedError::Internal(format!("an inline table's rows: {e}")))?;
        hash.update((name.len() as u64).to_be_bytes());
        hash.update(name.as_bytes());
        hash.update((bytes.len() as u64).to_be_bytes());
        hash.update(&bytes);
    }
    Ok(hash.finalize().into())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
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
    fn the_digest_changes_with_the_query_and_with_the_inlined_rows() {
        let digest = |values: &[i64], above| encoder_digest(&plan(values, above)).unwrap();
        assert_eq!(digest(&[1, 2], 0), digest(&[1, 2], 0));
        assert_ne!(digest(&[1, 2], 0), digest(&[1, 2], 1));
        assert_ne!(digest(&[1, 2], 0), digest(&[1, 3], 0));
    }
}
