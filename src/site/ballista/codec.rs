//! The plan codec of a fedsql cluster: Ballista's own (its shuffle
//! nodes, DataFusion's operators and scans) plus the functions a site
//! adds to an encoder's plan that have no name of their own — the
//! policy's input-counting guards ([`Guarded`], named as the aggregate
//! they wrap) and the evaluation wrappers that give NULL instead of
//! failing on a value ([`never_fail`]). Every other function is sent by
//! name and found in the functions every fedsql process registers
//! ([`site_functions`]).
//!
//! The worker, the scheduler and every executor use this one codec, so a
//! plan decodes on an executor to the plan the worker built.

use std::sync::Arc;

use datafusion::common::{DataFusionError, Result as DFResult};
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use ballista_core::serde::BallistaPhysicalExtensionCodec;

use crate::site::release::guarded::{GuardWire, Guarded};
use crate::site::release::never_fail::{self, NeverFailWire};

/// What starts a function definition this codec wrote.
const TAG: &[u8] = b"fedsql:";

/// A guard's definition: its inner aggregate (name and own definition)
/// and its settings.
#[derive(serde::Serialize, serde::Deserialize)]
struct GuardDefinition {
    inner: String,
    inner_definition: Vec<u8>,
    guard: GuardWire,
}

/// Ballista's physical codec, and fedsql's site functions.
#[derive(Debug)]
pub(crate) struct SiteCodec {
    ballista: BallistaPhysicalExtensionCodec,
    /// Every function a fedsql process registers, to find by name.
    functions: SessionState,
}

impl SiteCodec {
    pub(crate) fn new() -> Self {
        Self {
            ballista: BallistaPhysicalExtensionCodec::default(),
            functions: site_functions(SessionConfig::new()),
        }
    }

    fn aggregate(&self, name: &str) -> DFResult<Arc<AggregateUDF>> {
        self.functions
            .aggregate_functions()
            .get(name)
            .cloned()
            .ok_or_else(|| unknown("aggregate", name))
    }

    fn scalar(&self, name: &str) -> DFResult<Arc<ScalarUDF>> {
        self.functions
            .scalar_functions()
            .get(name)
            .cloned()
            .ok_or_else(|| unknown("scalar function", name))
    }
}

fn unknown(kind: &str, name: &str) -> DataFusionError {
    DataFusionError::Plan(format!(
        "{kind} `{name}` is not one of fedsql's functions: the cluster runs only what a fedsql site runs"
    ))
}

fn json_error(e: serde_json::Error) -> DataFusionError {
    DataFusionError::Internal(format!("a fedsql function definition: {e}"))
}

impl PhysicalExtensionCodec for SiteCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.ballista.try_decode(buf, inputs, ctx, proto_converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DFResult<()> {
        self.ballista.try_encode(node, buf, proto_converter)
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> DFResult<()> {
        let Some(guard) = node.inner().downcast_ref::<Guarded>() else {
            return self.ballista.try_encode_udaf(node, buf);
        };
        let mut inner_definition = Vec::new();
        self.try_encode_udaf(guard.inner(), &mut inner_definition)?;
        let definition = GuardDefinition {
            inner: guard.inner().name().to_string(),
            inner_definition,
            guard: guard.to_wire(),
        };
        buf.extend_from_slice(TAG);
        serde_json::to_writer(buf, &definition).map_err(json_error)
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> DFResult<Arc<AggregateUDF>> {
        let Some(definition) = buf.strip_prefix(TAG) else {
            return match buf.is_empty() {
                true => self.aggregate(name),
                false => self.ballista.try_decode_udaf(name, buf),
            };
        };
        let definition: GuardDefinition = serde_json::from_slice(definition).map_err(json_error)?;
        let inner = match definition.inner_definition.is_empty() {
            true => self.aggregate(&definition.inner)?,
            false => self.try_decode_udaf(&definition.inner, &definition.inner_definition)?,
        };
        Ok(Arc::new(AggregateUDF::new_from_impl(Guarded::from_wire(
            inner,
            definition.guard,
        ))))
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> DFResult<()> {
        let Some(wire) = never_fail::to_wire(node) else {
            return self.ballista.try_encode_udf(node, buf);
        };
        buf.extend_from_slice(TAG);
        serde_json::to_writer(buf, &wire).map_err(json_error)
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> DFResult<Arc<ScalarUDF>> {
        let Some(definition) = buf.strip_prefix(TAG) else {
            return match buf.is_empty() {
                true => self.scalar(name),
                false => self.ballista.try_decode_udf(name, buf),
            };
        };
        let wire: NeverFailWire = serde_json::from_slice(definition).map_err(json_error)?;
        Ok(Arc::new(never_fail::from_wire(wire, |name| {
            self.scalar(name)
        })?))
    }
}

/// A session with every function a fedsql site may run (DataFusion's and
/// fedsql's aggregates and scalar functions): the scheduler's sessions,
/// the executors' function registry and the codec's look-ups.
pub(crate) fn site_functions(config: SessionConfig) -> SessionState {
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .build();
    let ctx = SessionContext::new_with_state(state);
    fedsql_udfs::register_all(&ctx);
    ctx.state()
}
