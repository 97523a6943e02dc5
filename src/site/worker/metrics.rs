//! A worker's Prometheus metrics (`GET /metrics` of [`super::admin`]):
//! requests by decision, bytes released, request durations, and the ε
//! each analyst has spent per table (read from the ledger when scraped).

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabels {
    analyst: String,
    table: String,
}

/// The counters a worker keeps while it serves.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<DecisionLabels, Counter>,
    bytes: Counter,
    duration: Histogram,
    epsilon: Family<BudgetLabels, Gauge<f64, AtomicU64>>,
    kept_fits: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("fedsql_worker");
        let requests = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "requests",
            "Encoder requests by decision (released, refused, pending)",
            requests.clone(),
        );
        let bytes = Counter::default();
        registry.register(
            "released_bytes",
            "Bytes of aggregate state released",
            bytes.clone(),
        );
        let duration = Histogram::new([
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ]);
        registry.register(
            "request_duration_seconds",
            "Time from a request's arrival to its decision",
            duration.clone(),
        );
        let epsilon = Family::<BudgetLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "dp_epsilon_spent",
            "Differential-privacy epsilon spent, per analyst and table",
            epsilon.clone(),
        );
        let kept_fits = Gauge::default();
        registry.register(
            "kept_fits",
            "Fits whose rows are kept in memory between their rounds",
            kept_fits.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            requests,
            bytes,
            duration,
            epsilon,
            kept_fits,
        }
    }
}

impl Metrics {
    /// Counts one request's decision, the bytes it released and its time.
    pub(crate) fn observe(&self, decision: &str, bytes: u64, seconds: f64) {
        self.requests
            .get_or_create(&DecisionLabels {
                decision: decision.to_string(),
            })
            .inc();
        self.bytes.inc_by(bytes);
        self.duration.observe(seconds);
    }

    /// The text exposition, with the ε spent per (analyst, table) and the
    /// number of fits whose rows are kept given.
    pub(crate) fn render(&self, spent: &[(String, String, f64)], kept_fits: usize) -> String {
        self.kept_fits
            .set(i64::try_from(kept_fits).unwrap_or(i64::MAX));
        for (analyst, table, epsilon) in spent {
            self.epsilon
                .get_or_create(&BudgetLabels {
                    analyst: analyst.clone(),
                    table: table.clone(),
                })
                .set(*epsilon);
        }
        let mut text = String::new();
        let registry = self.registry.lock().expect("not poisoned");
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_has_every_family() {
        let m = Metrics::default();
        m.observe("released", 120, 0.02);
        m.observe("refused", 0, 0.001);
        let text = m.render(&[("alice".into(), "clinic".into(), 0.5)], 2);
        assert!(
            text.contains("fedsql_worker_requests_total{decision=\"released\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("fedsql_worker_released_bytes_total 120"),
            "{text}"
        );
        assert!(
            text.contains("fedsql_worker_request_duration_seconds_count 2"),
            "{text}"
        );
        assert!(
            text.contains("fedsql_worker_dp_epsilon_spent{analyst=\"alice\",table=\"clinic\"} 0.5"),
            "{text}"
        );
        assert!(text.contains("fedsql_worker_kept_fits 2"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
