//! Analyst profiles and manual approval at a worker, end to end: a worker
//! started from a TOML file with `[tokens]` and `[analysts.NAME]` sections
//! answers each analyst (their own token) what their profile allows and
//! refuses the rest, naming the profile and the rule; a profile's larger k
//! holds for that analyst only; a request under `approval = "manual"`
//! waits (recorded as pending in the audit trail) until the approvals file
//! says approved, without a restart, and an approved fit's later rounds
//! need no approval of their own.

use std::path::{Path, PathBuf};

use datafusion::arrow::array::AsArray;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::arrow::record_batch::RecordBatch;
use fedsql::FedContext;
use fedsql::site::worker::{self, RunningWorker, WorkerArgs, WorkerConfig, approvals};
use tempfile::TempDir;

use crate::remote::run;
use crate::support::{Format, demo_rows, write_clients};

const ANALYSTS: [&str; 3] = ["alice", "bob", "carol"];

/// A worker serving the demo rows as `clinic` and a 27-row table `groups`
/// (groups of 20 and 7 rows) under the default policy, with profiles.
pub(crate) struct Site {
    pub(crate) dir: TempDir,
    pub(crate) worker: RunningWorker,
    audit: PathBuf,
    pub(crate) approvals: PathBuf,
}

fn token_path(dir: &Path, analyst: &str) -> PathBuf {
    dir.join(format!("{analyst}.token"))
}

pub(crate) async fn site(profiles: &str) -> Site {
    site_with("", profiles).await
}

/// [`site`] with more top-level settings (`top`: TOML lines).
pub(crate) async fn site_with(top: &str, profiles: &str) -> Site {
    let dir = TempDir::new().unwrap();
    let (header, rows) = demo_rows();
    let clinic = write_clients(dir.path(), &header, &rows, &[rows.len()], Format::Csv)
        .pop()
        .unwrap();
    let groups = dir.path().join("groups.csv");
    let mut text = String::from("g,x\n");
    for i in 0..27 {
        text.push_str(&format!("{},{i}\n", if i < 7 { "small" } else { "large" }));
    }
    std::fs::write(&groups, text).unwrap();
    let mut tokens = String::new();
    for analyst in ANALYSTS {
        std::fs::write(
            token_path(dir.path(), analyst),
            format!("token-of-{analyst}-0123456789"),
        )
        .unwrap();
        tokens.push_str(&format!("{analyst} = \"{analyst}.token\"\n"));
    }
    let config = dir.path().join("worker.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\naudit_log = \"audit.jsonl\"\n{top}[tables]\nclinic = \"{}\"\ngroups = \"{}\"\n[tokens]\n{tokens}{profiles}",
            clinic.display(),
            groups.display()
        ),
    )
    .unwrap();
    let args = WorkerArgs {
        config: Some(config),
        ..Default::default()
    };
    let config = WorkerConfig::from_args(&args).await.unwrap();
    let audit = config.audit_log.clone().unwrap();
    let approvals = config.approvals_file.clone();
    let worker = worker::start(config).await.unwrap();
    Site {
        dir,
        worker,
        audit,
        approvals,
    }
}

impl Site {
    /// A session of `analyst`, with both tables registered with their token.
    pub(crate) async fn session(&self, analyst: &str) -> FedContext {
        let ctx = FedContext::new();
        for table in ["clinic", "groups"] {
            run(
                &ctx,
                &format!(
                    "CREATE FEDERATED TABLE {table} CLIENTS ('site' = 'grpc://{}/{table}') OPTIONS ('token_file' '{}')",
                    self.worker.addr(),
                    token_path(self.dir.path(), analyst).display()
                ),
            )
            .await
            .unwrap();
        }
        ctx
    }

    fn audit_records(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

pub(crate) async fn refusal(ctx: &FedContext, sql: &str) -> String {
    match run(ctx, sql).await {
        Ok(batches) => panic!("{sql}: answered {batches:?}"),
        Err(e) => e.to_string(),
    }
}

pub(crate) fn numbers(batches: &[RecordBatch], column: usize) -> Vec<f64> {
    batches
        .iter()
        .flat_map(|b| {
            let c = cast(b.column(column), &DataType::Float64).unwrap();
            c.as_primitive::<Float64Type>().values().to_vec()
        })
        .collect()
}

const PROFILES: &str = r#"
[analysts.alice]
tables = ["clinic", "groups"]
functions = ["descriptive", "glm"]
deny_columns = ["region"]
min_group_rows = 10

[analysts.default]
functions = ["descriptive"]
"#;

#[tokio::test]
async fn a_profile_answers_what_it_allows_and_refuses_the_rest_by_name() {
    let site = site(PROFILES).await;
    let alice = site.session("alice").await;
    let carol = site.session("carol").await;
    let n = demo_rows().1.len() as f64;
    // Allowed: a descriptive query and a glm.
    let got = run(&alice, "SELECT count(*), avg(age) FROM clinic")
        .await
        .unwrap();
    assert_eq!(numbers(&got, 0), [n]);
    run(
        &alice,
        "SELECT * FROM glm('clinic', 'event ~ age + bmi', 'binomial')",
    )
    .await
    .unwrap();
    // The denied column, wherever it is read.
    for sql in [
        "SELECT count(*) FROM clinic WHERE region = 'north'",
        "SELECT region, count(*) FROM clinic GROUP BY region",
        "SELECT count(*) FROM clinic WHERE upper(region) = 'NORTH'",
        "SELECT sum(CASE WHEN region = 'north' THEN 1 ELSE 0 END) FROM clinic",
        "SELECT * FROM glm('clinic', 'event ~ age + region', 'binomial')",
    ] {
        let e = refusal(&alice, sql).await;
        assert!(
            e.contains("analyst profile `alice` (deny_columns)") && e.contains("`region`"),
            "{sql}: {e}"
        );
    }
    // A function outside the allow-list.
    let e = refusal(&alice, "SELECT * FROM kmeans('clinic', 'age, bmi', 2)").await;
    assert!(
        e.contains("analyst profile `alice` (functions)") && e.contains("kmeans_step"),
        "{e}"
    );
    // The default profile (carol has none of her own): descriptive only.
    let got = run(&carol, "SELECT count(*) FROM clinic").await.unwrap();
    assert_eq!(numbers(&got, 0), [n]);
    let e = refusal(
        &carol,
        "SELECT * FROM glm('clinic', 'event ~ age + bmi', 'binomial')",
    )
    .await;
    assert!(
        e.contains("analyst profile `default` (functions)") && e.contains("irls_step"),
        "{e}"
    );
    // The profile's k (10) holds for alice only: carol, under the
    // policy's k = 5, gets both groups.
    let sql = "SELECT g, count(*) AS n FROM groups GROUP BY g ORDER BY g";
    let e = refusal(&alice, sql).await;
    assert!(e.contains("fewer than 10"), "{e}");
    let got = run(&carol, sql).await.unwrap();
    assert_eq!(numbers(&got, 1), [20.0, 7.0]);
    // Every refusal is in the audit trail, with the profile's rule.
    let records = site.audit_records();
    assert!(records.iter().any(|r| {
        r["analyst"] == "alice"
            && r["decision"] == "refused"
            && r["rule"]
                .as_str()
                .is_some_and(|rule| rule.contains("analyst profile `alice` (deny_columns)"))
    }));
}

/// `require_secure` in one analyst's profile: her plain aggregates are
/// refused at the worker (naming the rule), another analyst's answered.
#[tokio::test]
async fn a_profile_may_require_masked_aggregates_for_one_analyst() {
    let site = site("[analysts.alice]\nrequire_secure = true\n").await;
    let alice = site.session("alice").await;
    let bob = site.session("bob").await;
    let n = demo_rows().1.len() as f64;
    for sql in [
        "SELECT count(*) FROM clinic",
        "SELECT sum(age) FROM clinic",
        "SELECT region, avg(age) FROM clinic GROUP BY region",
    ] {
        let e = refusal(&alice, sql).await;
        assert!(e.contains("require_secure"), "{sql}: {e}");
    }
    let got = run(&bob, "SELECT count(*) FROM clinic").await.unwrap();
    assert_eq!(numbers(&got, 0), [n]);
}

#[tokio::test]
async fn a_table_outside_the_profile_is_refused_even_its_schema() {
    let site = site(
        r#"
[analysts.alice]
tables = ["clinic"]
"#,
    )
    .await;
    let alice = FedContext::new();
    let e = match run(
        &alice,
        &format!(
            "CREATE FEDERATED TABLE groups CLIENTS ('site' = 'grpc://{}/groups') OPTIONS ('token_file' '{}')",
            site.worker.addr(),
            token_path(site.dir.path(), "alice").display()
        ),
    )
    .await
    {
        Ok(_) => panic!("registered a table outside the profile"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("analyst profile `alice` (tables)"), "{e}");
    // Bob has no profile and there is no default one: all tables.
    let bob = site.session("bob").await;
    let got = run(&bob, "SELECT count(*) FROM groups").await.unwrap();
    assert_eq!(numbers(&got, 0), [27.0]);
}

#[tokio::test]
async fn looser_profiles_are_start_up_errors() {
    for (profile, expected) in [
        ("[analysts.alice]\nmin_group_rows = 2\n", "looser"),
        (
            "[analysts.alice]\nfunctions = [\"everything\"]\n",
            "no group",
        ),
        ("[analysts.zed]\n", "names no analyst"),
        ("[analysts.alice]\ntables = [\"nope\"]\n", "no table `nope`"),
        ("[analysts.alice]\ncolour = \"red\"\n", "colour"),
    ] {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("t.csv"), "x\n1\n").unwrap();
        std::fs::write(dir.path().join("alice.token"), "token-of-alice-0123").unwrap();
        let config = dir.path().join("worker.toml");
        std::fs::write(
            &config,
            format!(
                "listen = \"127.0.0.1:0\"\naudit_log = \"none\"\n[tables]\nt = \"t.csv\"\n[tokens]\nalice = \"alice.token\"\n{profile}"
            ),
        )
        .unwrap();
        let args = WorkerArgs {
            config: Some(config),
            ..Default::default()
        };
        let e = WorkerConfig::from_args(&args)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(expected), "{profile}: {e}");
    }
}

/// The approval id in a pending refusal.
pub(crate) fn pending_id(error: &str) -> String {
    let start = error
        .find("request ")
        .map(|i| i + "request ".len())
        .unwrap_or_else(|| panic!("no request id: {error}"));
    let id: String = error[start..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    assert_eq!(id.len(), 12, "{error}");
    id
}

#[tokio::test]
async fn manual_approval_holds_new_requests_until_the_data_owner_approves() {
    let site = site(
        r#"
[analysts.bob]
approval = "manual"
"#,
    )
    .await;
    let bob = site.session("bob").await;
    let carol = site.session("carol").await;
    let sql = "SELECT count(*) FROM clinic";
    let e = refusal(&bob, sql).await;
    assert!(e.contains("awaits the data owner's approval"), "{e}");
    let id = pending_id(&e);
    // Carol (no profile) is not held.
    run(&carol, sql).await.unwrap();
    // Pending in the audit trail and in the approvals file.
    assert!(
        site.audit_records()
            .iter()
            .any(|r| r["analyst"] == "bob" && r["decision"] == "pending")
    );
    let listed = approvals::current(&site.approvals).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.as_str(), listed[0].status.as_str()),
        (id.as_str(), "pending")
    );
    // Approved, without a restart: answered.
    approvals::set(&site.approvals, &id, "approved").unwrap();
    let got = run(&bob, sql).await.unwrap();
    assert_eq!(numbers(&got, 0), [demo_rows().1.len() as f64]);
    // Another query is new: held again; denied, it is refused as denied.
    let other = "SELECT avg(age) FROM clinic";
    let id = pending_id(&refusal(&bob, other).await);
    approvals::set(&site.approvals, &id, "denied").unwrap();
    assert!(
        refusal(&bob, other)
            .await
            .contains("denied by the data owner")
    );

    // A fit: each kind of round is approved once; its later rounds (new
    // coefficients each) and a second run of the fit need no approval.
    let fit = "SELECT * FROM glm('clinic', 'event ~ age + bmi', 'binomial')";
    let mut approved = 0;
    let first = loop {
        match run(&bob, fit).await {
            Ok(batches) => break batches,
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("awaits"), "{e}");
                approvals::set(&site.approvals, &pending_id(&e), "approved").unwrap();
                approved += 1;
                assert!(approved <= 3, "a fit's rounds each needed an approval");
            }
        }
    };
    let again = run(&bob, fit).await.unwrap();
    assert_eq!(numbers(&first, 1), numbers(&again, 1));
    let rounds = site
        .audit_records()
        .iter()
        .filter(|r| r["analyst"] == "bob" && r["decision"] == "released")
        .count();
    assert!(
        rounds > approved + 2,
        "{rounds} released rounds, {approved} approvals"
    );
}

/// The rows a query carries (`VALUES`, a shared lookup) are part of what
/// an approval covers: other rows are a new request; and no control
/// character of an analyst's literal reaches the approvals file.
#[tokio::test]
async fn an_approval_covers_the_rows_a_query_carries_and_summaries_are_clean() {
    let site = site("[analysts.bob]\napproval = \"manual\"\n").await;
    let bob = site.session("bob").await;
    let with = |regions: &str| {
        format!(
            "SELECT count(*), avg(age) FROM clinic WHERE region IN (SELECT r FROM (VALUES {regions}) v(r))"
        )
    };
    let approved = with("('south'), ('north')");
    let id = pending_id(&refusal(&bob, &approved).await);
    approvals::set(&site.approvals, &id, "approved").unwrap();
    run(&bob, &approved).await.unwrap();
    let other = refusal(&bob, &with("('west'), ('east')")).await;
    assert!(other.contains("awaits"), "{other}");
    assert_ne!(pending_id(&other), id);
    let _ = refusal(
        &bob,
        "SELECT avg(age) FROM clinic WHERE sex = 'M\u{1b}[85D\u{1b}[Kaggregates: count(*)'",
    )
    .await;
    let listed = approvals::current(&site.approvals).unwrap();
    assert!(listed.len() >= 3);
    for record in listed {
        assert!(!record.request.chars().any(char::is_control), "{record:?}");
    }
}
