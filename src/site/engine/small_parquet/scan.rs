//! How a small file's scan reads it ([`SmallScan`]): the table's columns,
//! the columns the projection reads, and the projection over them.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result as DFResult;
use datafusion::datasource::physical_plan::{FileScanConfig, FileSource, ParquetSource};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderMetadata;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::projection::ProjectionExprs;
use datafusion::physical_expr::utils::reassign_expr_columns;

/// How a small file's scan reads it: which of the table's columns, and
/// the scan's projection over them. Built from a template's scan when the
/// scan is one this module can read; `None` otherwise.
#[derive(Debug, Clone)]
pub(crate) struct SmallScan {
    /// The table's columns (as the scan's file schema names them).
    pub(super) table: SchemaRef,
    /// The table's columns the projection reads, by name, ascending.
    read: SchemaRef,
    /// Per output column, its expression over the `read` columns (a
    /// column, or what DataFusion pushed into the scan: `x9 = 1`).
    pub(super) exprs: Vec<Arc<dyn PhysicalExpr>>,
    /// The scan's output.
    pub(super) schema: SchemaRef,
    pub(super) batch_size: usize,
}

impl SmallScan {
    /// The small-file reading of `config`'s scan, when it is a projection
    /// of Parquet columns: no filter evaluated in the scan, no limit, no
    /// partition or virtual columns.
    pub(crate) fn of(config: &FileScanConfig, batch_size: usize) -> Option<Self> {
        let source = config.file_source().downcast_ref::<ParquetSource>()?;
        let options = &source.table_parquet_options().global;
        // Filters evaluated in the scan (a row filter) are not applied
        // here; a predicate only used to prune row groups may be skipped.
        if options.pushdown_filters || config.limit.is_some() {
            return None;
        }
        let table_schema = source.table_schema();
        if !table_schema.table_partition_cols().is_empty()
            || !table_schema.virtual_columns().is_empty()
        {
            return None;
        }
        let table = Arc::clone(table_schema.file_schema());
        let all =
            ProjectionExprs::from_indices(&(0..table.fields().len()).collect::<Vec<_>>(), &table);
        let projection = source.projection().unwrap_or(&all);
        let read = Arc::new(table.project(&projection.column_indices()).ok()?);
        let exprs: Vec<Arc<dyn PhysicalExpr>> = projection
            .iter()
            .map(|p| reassign_expr_columns(Arc::clone(&p.expr), &read).ok())
            .collect::<Option<_>>()?;
        let schema = config.projected_schema().ok()?;
        let types_agree = schema.fields().len() == exprs.len()
            && schema
                .fields()
                .iter()
                .zip(&exprs)
                .all(|(out, e)| e.data_type(&read).is_ok_and(|t| &t == out.data_type()));
        types_agree.then(|| Self {
            table,
            read,
            exprs,
            schema,
            batch_size: config.batch_size.unwrap_or(batch_size).max(1),
        })
    }

    /// The columns to read of a file of `metadata`, and the place of each
    /// column the scan reads among them; `None` when a column of the table
    /// is not in the file with the table's type.
    pub(super) fn columns_in(
        &self,
        metadata: &ArrowReaderMetadata,
    ) -> Option<(ProjectionMask, Vec<usize>)> {
        // Each column read: its root column in the file, by name.
        let file_schema = Arc::clone(metadata.schema());
        let mut roots = Vec::with_capacity(self.read.fields().len());
        for wanted in self.read.fields() {
            match file_schema.column_with_name(wanted.name()) {
                Some((root, field)) if field.data_type() == wanted.data_type() => roots.push(root),
                _ => return None,
            }
        }
        // The mask reads roots in the file's order; each column is then
        // taken from its place among them.
        let mut read: Vec<usize> = roots.clone();
        read.sort_unstable();
        read.dedup();
        let places = roots
            .iter()
            .map(|r| read.binary_search(r).expect("every root is read"))
            .collect();
        Some((
            ProjectionMask::roots(metadata.parquet_schema(), read),
            places,
        ))
    }

    /// The scan's output of a decoded batch: its columns (at `places`) as
    /// the table names them, then the projection over them.
    pub(super) fn output(&self, decoded: &RecordBatch, places: &[usize]) -> DFResult<RecordBatch> {
        let rows = RecordBatchOptions::new().with_row_count(Some(decoded.num_rows()));
        let columns = places
            .iter()
            .map(|&p| Arc::clone(decoded.column(p)))
            .collect();
        let read = RecordBatch::try_new_with_options(Arc::clone(&self.read), columns, &rows)?;
        let output = self
            .exprs
            .iter()
            .map(|e| e.evaluate(&read)?.into_array(read.num_rows()))
            .collect::<DFResult<Vec<ArrayRef>>>()?;
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            output,
            &rows,
        )?)
    }
}
