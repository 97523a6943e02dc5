//! The digest of the encoder a site runs in a secure round: part of the
//! view each survivor signs ([`crate::protocol::secure::consistency`]).

use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, TableReference};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Extension, LogicalPlan};
use datafusion_proto::bytes::logical_plan_to_bytes_with_extension_codec;
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use sha2::{Digest, Sha256};

use crate::error::{FedError, Result};
use crate::protocol::codec::InlineTable;
use crate::protocol::federated_scan::FederatedScan;
use crate::protocol::flight::batches_to_ipc;

/// The digest of the encoder a site runs in a secure round: SHA-256 of
/// the plan's datafusion-proto encoding — its structure, every node and
/// expression with all its fields (a column's qualifier apart from its
/// name, an expression's nesting, a join's null equality, every literal
/// typed), not the text it prints — with the rows of every table inlined
/// in it (shared tables a worker was sent) as Arrow IPC bytes, and the
/// federated table as one mark (the table a site binds it to is its own:
/// its name differs between honest sites). Every site of an honest round
/// runs the same encoder; a coordinator that sends one site the analyst's
/// query and the others one that adds nothing (`WHERE false`, a join with
/// no rows) gives that site a view no other site signs. Earlier digests
/// hashed the printed plan and a list of fields; the fourth, fifth and
/// sixth outside attacks found plans that print alike (a string literal
/// spelling out another plan, a join's null equality, a column named
/// `"t.x"` beside the qualified `t.x`, `x - (x - x)` beside `(x - x) - x`).
pub fn encoder_digest(plan: &LogicalPlan) -> Result<[u8; 32]> {
    let bytes = logical_plan_to_bytes_with_extension_codec(plan, &DigestCodec).map_err(|e| {
        FedError::InvalidArgument(format!(
            "this encoder cannot be digested for a secure round: {e}"
        ))
    })?;
    let mut hash = Sha256::new();
    hash.update(b"fedsql secure aggregation v4: encoder");
    hash.update((bytes.len() as u64).to_be_bytes());
    hash.update(&bytes);
    // What datafusion-proto leaves out of a custom scan: its row limit (an
    // in-process site's file scan honours it; the seventh outside attack
    // sent the others `fetch = 0` under one digest).
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            hash.update(match scan.fetch {
                Some(n) => [&[1u8][..], &(n as u64).to_be_bytes()].concat(),
                None => vec![0u8],
            });
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(hash.finalize().into())
}

/// Encodes a plan's tables for the digest: the federated table as one
/// mark, inline rows as their IPC bytes, another (shared) table of an
/// in-process site by its name.
#[derive(Debug)]
struct DigestCodec;

const FEDERATED: u8 = 0;
const INLINE: u8 = 1;
const SHARED: u8 = 2;

impl LogicalExtensionCodec for DigestCodec {
    fn try_decode(
        &self,
        _: &[u8],
        _: &[LogicalPlan],
        _: &TaskContext,
    ) -> datafusion::common::Result<Extension> {
        Err(DataFusionError::NotImplemented("digest only".into()))
    }

    fn try_encode(&self, node: &Extension, _: &mut Vec<u8>) -> datafusion::common::Result<()> {
        Err(DataFusionError::NotImplemented(format!(
            "plan node `{}` in a secure encoder",
            node.node.name()
        )))
    }

    fn try_decode_table_provider(
        &self,
        _: &[u8],
        _: &TableReference,
        _: datafusion::arrow::datatypes::SchemaRef,
        _: &TaskContext,
    ) -> datafusion::common::Result<Arc<dyn TableProvider>> {
        Err(DataFusionError::NotImplemented("digest only".into()))
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> datafusion::common::Result<()> {
        if FederatedScan::of(node.as_ref()).is_some() {
            buf.push(FEDERATED);
        } else if let Some(inline) = node.downcast_ref::<InlineTable>() {
            buf.push(INLINE);
            buf.extend_from_slice(&batches_to_ipc(&inline.schema(), inline.batches())?);
        } else {
            buf.push(SHARED);
            buf.extend_from_slice(table_ref.to_string().as_bytes());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
    fn an_expressions_nesting_changes_the_digest_though_it_prints_alike() {
        let project = |e| {
            LogicalPlanBuilder::from(plan(&[1, 2], 0))
                .project(vec![e])
                .unwrap()
                .build()
                .unwrap()
        };
        let right = project(col("x") - (col("x") - col("x")));
        let left = project((col("x") - col("x")) - col("x"));
        assert_eq!(
            right.display_indent().to_string(),
            left.display_indent().to_string()
        );
        assert_ne!(
            encoder_digest(&right).unwrap(),
            encoder_digest(&left).unwrap()
        );
    }

    #[test]
    fn the_digest_changes_with_the_query_and_with_the_inlined_rows() {
        let digest = |values: &[i64], above| encoder_digest(&plan(values, above)).unwrap();
        assert_eq!(digest(&[1, 2], 0), digest(&[1, 2], 0));
        assert_ne!(digest(&[1, 2], 0), digest(&[1, 2], 1));
        assert_ne!(digest(&[1, 2], 0), digest(&[1, 3], 0));
    }
}
