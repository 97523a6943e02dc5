//! Fail closed at the site: what may run beside the data is an allow-list
//! (one catalogue of functions, one plan shape), evaluation never fails on
//! one person's values, and sizes are bounded before they are allocated.
//! Each attack of issue 50's review is tried in process (a table under a
//! policy) and at workers with their default policy, as a hostile analyst
//! would (plain SQL) and, where it needs a hand-made plan, as a hostile
//! coordinator would (the worker's token and a plan of its own).

use std::sync::Arc;

use arrow_flight::Ticket;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::logical_expr::expr::{AggregateFunction, ScalarFunction};
use datafusion::logical_expr::{Aggregate, EmptyRelation, Expr, LogicalPlan, lit};
use fedsql::FedContext;
use fedsql::protocol::codec::plan_to_bytes;
use fedsql::protocol::flight::{EncodeRequest, TicketCommand, ticket_command};
use fedsql::site::release::policy::DisclosurePolicy;
use fedsql_udfs::catalogue;
use futures::TryStreamExt;
use prost::Message;
use tempfile::TempDir;

use crate::attacks::{aggregate_of, answer, at_workers, in_process, write_sites};
use crate::remote::{TOKEN, Workers, flight, run, with_token};

#[tokio::test]
async fn every_registered_function_is_catalogued_or_refused() {
    let ctx = FedContext::new();
    let state = ctx.session().state();
    let empty = Arc::new(LogicalPlan::EmptyRelation(EmptyRelation {
        produce_one_row: true,
        schema: Arc::new(DFSchema::empty()),
    }));
    let schema = Arc::new(
        DFSchema::try_from(Schema::new(vec![Field::new("n", DataType::Int64, true)])).unwrap(),
    );
    let count = state.aggregate_functions()["count"].clone();
    // An encoder whose one aggregate is `aggregate` FILTERed by `filter`.
    let encoder = |aggregate: Expr| {
        LogicalPlan::Aggregate(
            Aggregate::try_new_with_schema(
                Arc::clone(&empty),
                vec![],
                vec![aggregate],
                Arc::clone(&schema),
            )
            .unwrap(),
        )
    };
    if std::env::var_os("FEDSQL_LIST_FUNCTIONS").is_some() {
        let mut names: Vec<&String> = state.scalar_functions().keys().collect();
        names.sort();
        eprintln!("SCALARS {names:?}");
    }
    let mut catalogued = 0;
    let mut refused = 0;
    for (name, udf) in state.scalar_functions() {
        let call = Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(udf), vec![]));
        let counted = Expr::AggregateFunction(AggregateFunction::new_udf(
            Arc::clone(&count),
            vec![lit(1)],
            false,
            Some(Box::new(call)),
            vec![],
            None,
        ));
        let admitted = fedsql::site::release::gate::admit(&encoder(counted));
        // The registry keys a function by its name and by each alias.
        if catalogue::scalar(udf.name()).is_some() {
            catalogued += 1;
            // Admitted as far as functions go (the empty input is not a
            // federated table, which the shape check then names).
            let e = admitted.unwrap_err().to_string();
            assert!(e.contains("over the federated table's rows"), "{name}: {e}");
        } else {
            refused += 1;
            let e = admitted.unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "function `{}`: it is not in the catalogue",
                    udf.name()
                )),
                "{name}: {e}"
            );
        }
    }
    for (name, udaf) in state.aggregate_functions() {
        let call = Expr::AggregateFunction(AggregateFunction::new_udf(
            Arc::clone(udaf),
            vec![],
            false,
            None,
            vec![],
            None,
        ));
        let e = fedsql::site::release::gate::admit(&encoder(call))
            .unwrap_err()
            .to_string();
        let known = catalogue::aggregate(udaf.name()).is_some()
            || udaf
                .aliases()
                .iter()
                .any(|a| catalogue::aggregate(a).is_some());
        if known {
            catalogued += 1;
            assert!(e.contains("over the federated table's rows"), "{name}: {e}");
        } else {
            refused += 1;
            assert!(
                e.contains(&format!(
                    "aggregate `{}`: it is not in the catalogue",
                    udaf.name()
                )),
                "{name}: {e}"
            );
        }
    }
    // Window functions are never run at a site; the catalogue names none.
    assert!(catalogued > 100 && refused > 100, "{catalogued} {refused}");
    // Every catalogued name is a function the session has.
    let mut stale: Vec<&str> = catalogue::SCALARS
        .iter()
        .map(|s| s.name)
        .filter(|name| !state.scalar_functions().contains_key(*name))
        .collect();
    stale.extend(
        catalogue::AGGREGATES
            .iter()
            .map(|a| a.name)
            .filter(|name| !state.aggregate_functions().contains_key(*name)),
    );
    assert!(stale.is_empty(), "catalogued but not registered: {stale:?}");
}

/// `unnest` over one person's row makes five rows of one: refused at the
/// site (in process and at workers), as is a row-generating function.
#[tokio::test]
async fn row_amplification_is_refused() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process(&files).await;
    let (_workers, remote) = at_workers(&files).await;
    for ctx in [&local, &remote] {
        for sql in [
            "SELECT count(*), sum(x) FROM (SELECT unnest(make_array(1,2,3,4,5)) AS i, * FROM t WHERE id = 3)",
            "SELECT count(*) FROM (SELECT unnest(range(0, 20000000)) AS i FROM t)",
            "SELECT sum(x) FROM t WHERE length(repeat(g, 100000000)) > 0",
            "SELECT count(*) FROM t WHERE array_length(range(0, id * 100000000)) > 0",
        ] {
            let e = answer(ctx, sql).await.unwrap_err();
            assert!(e.contains("refused"), "{sql}: {e}");
        }
        // Ordinary questions still get their exact answer.
        let ok = answer(ctx, "SELECT count(*), g FROM t GROUP BY g ORDER BY g").await;
        assert_eq!(
            ok.unwrap(),
            "[[Text(\"20\"), Text(\"p\")], [Text(\"20\"), Text(\"q\")]]"
        );
    }
}

/// A failure that depends on one person's values is an oracle; under a
/// policy the site evaluates NULL-on-error, so the query answers the same
/// whichever branch the person's row takes.
#[tokio::test]
async fn no_error_oracle_depends_on_one_row() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process(&files).await;
    let (_workers, remote) = at_workers(&files).await;
    // `{}` is a condition on one person; each template fails on that row
    // only if the condition holds.
    // (probe, whether it is answered: evaluated NULL-on-error, or refused
    // up front because the catalogue does not know its function)
    let probes = [
        (
            true,
            "SELECT count(*) FROM t WHERE to_timestamp(CASE WHEN {} THEN 'garbage' ELSE '2020-01-01' END) IS NOT NULL OR x > 0",
        ),
        (
            true,
            "SELECT count(*) FROM t WHERE make_date(2020, CASE WHEN {} THEN 13 ELSE 1 END, 1) IS NOT NULL OR x > 0",
        ),
        (
            true,
            "SELECT sum(x / CASE WHEN {} THEN 0 ELSE 2 END) > 0 AS s, count(*) FROM t",
        ),
        (
            true,
            "SELECT sum(CASE WHEN {} THEN -9223372036854775808 ELSE 4 END / -1) < 0 AS s, count(*) FROM t",
        ),
        (
            true,
            "SELECT sum(CASE WHEN {} THEN -9223372036854775808 ELSE 4 END % -1) AS s, count(*) FROM t",
        ),
        (
            false,
            "SELECT count(*) FROM t WHERE regexp_like(g, CASE WHEN {} THEN '(' ELSE 'p' END) OR x > 0",
        ),
        (
            false,
            "SELECT count(*) FROM t WHERE g LIKE CASE WHEN {} THEN 'p\\' ELSE 'p' END OR x > 0",
        ),
        (
            false,
            "SELECT count(*) FROM t WHERE factorial(CASE WHEN {} THEN 100 ELSE 2 END) > 0 OR x > 0",
        ),
        (
            false,
            "SELECT count(*) FROM t WHERE chr(CASE WHEN {} THEN 0 ELSE 65 END) IS NOT NULL OR x > 0",
        ),
        (
            true,
            "SELECT count(*) FROM t WHERE CAST(CASE WHEN {} THEN 'x' ELSE '1' END AS INT) IS NOT NULL OR x > 0",
        ),
        (
            true,
            "SELECT count(*) FROM t WHERE (CASE WHEN {} THEN DATE '2020-01-01' ELSE NULL END) + INTERVAL '100000000 years' IS NOT NULL OR x > 0",
        ),
    ];
    for ctx in [&local, &remote] {
        for (answered, probe) in probes {
            let yes = answer(ctx, &probe.replace("{}", "id = 3 AND x > 100")).await;
            let no = answer(ctx, &probe.replace("{}", "id = 3 AND x > 1000")).await;
            assert_eq!(yes, no, "{probe}");
            assert_eq!(yes.is_ok(), answered, "{probe}: {yes:?}");
            if let Err(e) = &yes {
                assert!(!e.contains("'a'") && !e.contains("parse"), "{probe}: {e}");
            }
        }
    }
}

/// A hostile coordinator sends a worker an encoder whose join side is an
/// aggregate of the same table (its exact max, one person's value): the
/// worker refuses it, naming the operator.
#[tokio::test]
async fn a_hostile_coordinators_nested_aggregate_is_refused() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let workers = Workers::start_with(&files[..1], "t", |mut c| {
        c.policy = Some(DisclosurePolicy::default());
        c
    })
    .await;
    let addr = workers.workers[0].addr();
    let ctx = FedContext::new();
    run(&ctx, &workers.create("t")).await.unwrap();
    for sql in [
        "SELECT sum(t.x), max(m.hi), max(m.one) FROM t CROSS JOIN (SELECT max(x) AS hi, sum(CASE WHEN id = 3 THEN x END) AS one FROM t) m",
        "SELECT count(*) FROM (SELECT x FROM t ORDER BY x LIMIT 1)",
        "SELECT count(*) FROM (SELECT unnest(make_array(1,2,3,4,5)) AS i, * FROM t WHERE id = 3)",
    ] {
        let plan = ctx
            .session()
            .state()
            .create_logical_plan(sql)
            .await
            .unwrap();
        let plan = fedsql::coordinator::client_column::bind_plan(plan, "h0").unwrap();
        let bytes = plan_to_bytes(&aggregate_of(&plan), "t").await.unwrap();
        let ticket = TicketCommand {
            command: Some(ticket_command::Command::Encode(EncodeRequest {
                plan: bytes,
                fit_scope: None,
            })),
        }
        .encode_to_vec();
        let answer = async {
            let stream = flight(addr)
                .await
                .do_get(with_token(
                    Ticket {
                        ticket: ticket.into(),
                    },
                    TOKEN,
                ))
                .await?
                .into_inner();
            FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
                .try_collect::<Vec<RecordBatch>>()
                .await
                .map_err(|e| tonic::Status::internal(e.to_string()))
        }
        .await;
        let e = answer.unwrap_err();
        assert!(
            e.message().contains("refused") || e.code() == tonic::Code::PermissionDenied,
            "{sql}: {e:?}"
        );
    }
}

/// Histograms are bounded before anything is allocated.
#[tokio::test]
async fn histogram_bins_are_capped() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process(&files).await;
    for sql in [
        "SELECT histogram(x, 0, 200, 20000000) FROM t",
        "SELECT dp_histogram(x, 0, 200, 100000000, 0.5) FROM t",
    ] {
        let e = answer(&local, sql).await.unwrap_err();
        assert!(e.contains("at most 10000 bins"), "{sql}: {e}");
    }
    let ok = answer(&local, "SELECT histogram(x, 100, 400, 2) FROM t").await;
    assert_eq!(ok.unwrap(), "[[Text(\"[40, 0]\")]]");
}
