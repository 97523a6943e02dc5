//! The one integration test binary (every extra tests/*.rs would link
//! DataFusion again). Each module is one suite, in tests/suites/.

#[path = "suites/support.rs"]
mod support;

/// The TCP proxy that delays, caps and cuts a link (shared with `fedsql-bench --network`).
#[path = "../src/bench/fault_proxy.rs"]
mod fault_proxy;

#[path = "suites/admin.rs"]
mod admin;
#[path = "suites/attack54.rs"]
mod attack54;
#[path = "suites/attack54b.rs"]
mod attack54b;
#[path = "suites/attack54c.rs"]
mod attack54c;
#[path = "suites/attack54d.rs"]
mod attack54d;
#[path = "suites/attack54e.rs"]
mod attack54e;
#[path = "suites/attack54f.rs"]
mod attack54f;
#[path = "suites/attack54g.rs"]
mod attack54g;
#[path = "suites/attack54h.rs"]
mod attack54h;
#[path = "suites/attack54i.rs"]
mod attack54i;
#[path = "suites/attack54j.rs"]
mod attack54j;
#[path = "suites/attack54k.rs"]
mod attack54k;
#[path = "suites/attack54l.rs"]
mod attack54l;
#[path = "suites/attack54m.rs"]
mod attack54m;
#[path = "suites/attack54n.rs"]
mod attack54n;
#[path = "suites/attack54o.rs"]
mod attack54o;
#[path = "suites/attack54p.rs"]
mod attack54p;
#[path = "suites/attack54q.rs"]
mod attack54q;
#[path = "suites/attack54r.rs"]
mod attack54r;
#[path = "suites/attack54s.rs"]
mod attack54s;
#[path = "suites/attacks.rs"]
mod attacks;
#[path = "suites/attacks2.rs"]
mod attacks2;
#[path = "suites/attacks3.rs"]
mod attacks3;
#[path = "suites/audit.rs"]
mod audit;
#[cfg(feature = "ballista")]
#[path = "suites/ballista.rs"]
mod ballista;
#[path = "suites/client_column.rs"]
mod client_column;
#[path = "suites/consistency.rs"]
mod consistency;
#[path = "suites/dataframe.rs"]
mod dataframe;
#[path = "suites/doc_sessions.rs"]
mod doc_sessions;
#[path = "suites/dp.rs"]
mod dp;
#[path = "suites/errors.rs"]
mod errors;
#[path = "suites/explain.rs"]
mod explain;
#[path = "suites/explain_fits.rs"]
mod explain_fits;
#[path = "suites/fail_closed.rs"]
mod fail_closed;
#[path = "suites/faults.rs"]
mod faults;
#[path = "suites/faults_disks.rs"]
mod faults_disks;
#[path = "suites/fedsgd.rs"]
mod fedsgd;
#[path = "suites/formulas.rs"]
mod formulas;
#[path = "suites/functions.rs"]
mod functions;
#[path = "suites/fuzz_corpus.rs"]
mod fuzz_corpus;
#[path = "suites/glm.rs"]
mod glm;
#[path = "suites/golden.rs"]
mod golden;
#[path = "suites/heterogeneity.rs"]
mod heterogeneity;
#[path = "suites/hostile.rs"]
mod hostile;
#[path = "suites/idioms.rs"]
mod idioms;
#[path = "suites/lm.rs"]
mod lm;
#[path = "suites/load_smoke.rs"]
mod load_smoke;
#[path = "suites/missing_values.rs"]
mod missing_values;
#[path = "suites/multivariate.rs"]
mod multivariate;
#[path = "suites/networks.rs"]
mod networks;
#[path = "suites/output.rs"]
mod output;
#[path = "suites/pg_clients.rs"]
mod pg_clients;
#[path = "suites/pgwire.rs"]
mod pgwire;
#[path = "suites/policy.rs"]
mod policy;
#[path = "suites/profiles.rs"]
mod profiles;
#[path = "suites/refusal.rs"]
mod refusal;
#[path = "suites/remote.rs"]
mod remote;
#[path = "suites/repl.rs"]
mod repl;
#[path = "suites/secure.rs"]
mod secure;
#[path = "suites/secure_dp.rs"]
mod secure_dp;
#[path = "suites/secure_dropout.rs"]
mod secure_dropout;
#[path = "suites/stats.rs"]
mod stats;
#[path = "suites/survival.rs"]
mod survival;
#[path = "suites/survival_grid.rs"]
mod survival_grid;
#[path = "suites/tables.rs"]
mod tables;
#[path = "suites/vcov.rs"]
mod vcov;
#[path = "suites/worker_defence.rs"]
mod worker_defence;
