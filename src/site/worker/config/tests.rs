use super::*;

#[tokio::test]
async fn config_file_and_flags_combine() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("secret.txt"), "tok\n").unwrap();
    let config = dir.path().join("worker.toml");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:50051\"\ntoken_file = \"secret.txt\"\n[tables]\nclinic = \"data/clinic.parquet\"\n",
    )
    .unwrap();
    let args = WorkerArgs {
        config: Some(config.clone()),
        tables: vec!["visits=/srv/visits/".into()],
        ..Default::default()
    };
    let c = WorkerConfig::from_args(&args).await.unwrap();
    assert_eq!(c.listen, "127.0.0.1:50051".parse().unwrap());
    assert_eq!(c.token, "tok");
    assert_eq!(
        c.tables,
        [
            ("clinic".to_string(), dir.path().join("data/clinic.parquet")),
            ("visits".to_string(), PathBuf::from("/srv/visits/"))
        ]
    );
    // The flag wins over the file.
    let args = WorkerArgs {
        listen: Some("127.0.0.1:7".into()),
        ..args
    };
    assert_eq!(
        WorkerConfig::from_args(&args).await.unwrap().listen.port(),
        7
    );

    std::fs::write(&config, "listen = \"x\"\nport = 3\n").unwrap();
    let err = WorkerConfig::from_args(&WorkerArgs {
        config: Some(config),
        ..Default::default()
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("port"), "{err}");
    let err = WorkerConfig::from_args(&WorkerArgs {
        listen: Some("127.0.0.1:0".into()),
        token_file: Some(dir.path().join("secret.txt")),
        tables: vec!["no-equals-sign".into()],
        ..Default::default()
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("NAME=PATH"), "{err}");
}

#[tokio::test]
async fn dp_settings_and_named_tokens_come_from_the_toml_and_the_flags() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("ana.token"), "tok-ana\n").unwrap();
    std::fs::write(dir.path().join("bob.token"), "tok-bob\n").unwrap();
    let config = dir.path().join("worker.toml");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:0\"\n[tables]\nclinic = \"c.csv\"\n[tokens]\nana = \"ana.token\"\nbob = \"bob.token\"\n[policy]\nmin_group_rows = 10\ndp_budget = 4\ndp_ledger = \"ledger.toml\"\nrequire_dp = true\ndp_domain.region = [\"east\", \"west\"]\n",
    )
    .unwrap();
    let args = WorkerArgs {
        config: Some(config.clone()),
        ..Default::default()
    };
    let c = WorkerConfig::from_args(&args).await.unwrap();
    assert_eq!(c.policy.as_ref().unwrap().min_group_rows, 10);
    assert_eq!(c.dp.budget, Some(4.0));
    assert!(c.dp.require_dp);
    assert_eq!(c.dp.domains["region"], ["east", "west"]);
    assert_eq!(c.dp_ledger, Some(dir.path().join("ledger.toml")));
    assert_eq!(
        c.named_tokens,
        [
            ("ana".to_string(), "tok-ana".to_string()),
            ("bob".to_string(), "tok-bob".to_string())
        ]
    );
    assert_eq!(c.token, "", "no single token: the named ones only");
    // The flag wins; a budget without a ledger is refused.
    let c = WorkerConfig::from_args(&WorkerArgs {
        dp_budget: Some(2.5),
        ..args
    })
    .await
    .unwrap();
    assert_eq!(c.dp.budget, Some(2.5));
    std::fs::write(dir.path().join("t"), "tok\n").unwrap();
    let err = WorkerConfig::from_args(&WorkerArgs {
        listen: Some("127.0.0.1:0".into()),
        token_file: Some(dir.path().join("t")),
        tables: vec!["clinic=c.csv".into()],
        dp_budget: Some(1.0),
        ..Default::default()
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("--dp-ledger"), "{err}");
}

#[tokio::test]
async fn secure_without_peers_comes_from_the_toml_or_the_flag() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("t"), "tok\n").unwrap();
    let config = dir.path().join("worker.toml");
    let toml = |policy: &str| {
        std::fs::write(
            &config,
            format!("listen = \"127.0.0.1:0\"\ntoken_file = \"t\"\n[tables]\nclinic = \"c.csv\"\n{policy}"),
        )
        .unwrap();
    };
    let args = WorkerArgs {
        config: Some(config.clone()),
        ..Default::default()
    };
    toml("");
    let c = WorkerConfig::from_args(&args).await.unwrap();
    assert!(!c.secure_without_peers, "secure sums need peers by default");
    toml("[policy]\nsecure_without_peers = true\n");
    let c = WorkerConfig::from_args(&args).await.unwrap();
    assert!(c.secure_without_peers);
    assert!(c.policy.is_some());
    toml("[policy]\nsecure_without_peers = false\n");
    assert!(
        !WorkerConfig::from_args(&args)
            .await
            .unwrap()
            .secure_without_peers
    );
    let flagged = WorkerArgs {
        secure_without_peers: true,
        ..args.clone()
    };
    assert!(
        WorkerConfig::from_args(&flagged)
            .await
            .unwrap()
            .secure_without_peers
    );
    toml("[policy]\nsecure_without_peers = \"yes\"\n");
    let err = WorkerConfig::from_args(&args)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("secure_without_peers") && err.contains("true or false"),
        "{err}"
    );
    // Not a table's setting: the peers are the worker's.
    toml("[policy.tables.clinic]\nsecure_without_peers = true\n");
    assert!(WorkerConfig::from_args(&args).await.is_err());
}

#[tokio::test]
async fn the_epsilon_cap_comes_from_the_toml_and_the_flag_and_dp_needs_a_policy() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("t"), "tok\n").unwrap();
    let config = dir.path().join("worker.toml");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:0\"\ntoken_file = \"t\"\n[tables]\nclinic = \"c.csv\"\n[policy]\ndp_max_epsilon = 0.25\n",
    )
    .unwrap();
    let args = WorkerArgs {
        config: Some(config.clone()),
        ..Default::default()
    };
    let c = WorkerConfig::from_args(&args).await.unwrap();
    assert_eq!(c.dp.max_epsilon, 0.25);
    let c = WorkerConfig::from_args(&WorkerArgs {
        dp_max_epsilon: Some(0.5),
        ..args.clone()
    })
    .await
    .unwrap();
    assert_eq!(c.dp.max_epsilon, 0.5, "the flag wins");
    let plain = WorkerConfig::from_args(&WorkerArgs {
        listen: Some("127.0.0.1:0".into()),
        token_file: Some(dir.path().join("t")),
        tables: vec!["clinic=c.csv".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(plain.dp.max_epsilon, 1.0, "the default cap");
    for bad in [0.0, -1.0, f64::INFINITY, f64::NAN, 1e300] {
        assert!(
            WorkerConfig::from_args(&WorkerArgs {
                dp_max_epsilon: Some(bad),
                ..args.clone()
            })
            .await
            .is_err(),
            "{bad}"
        );
    }
    // DP settings under `policy = none` are a start-up error, from the
    // flags or the file, and a table of its own without a policy too.
    let err = WorkerConfig::from_args(&WorkerArgs {
        policy: Some("none".into()),
        dp_budget: Some(1.0),
        dp_ledger: Some(dir.path().join("ledger.toml")),
        ..args.clone()
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("policy = none"), "{err}");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:0\"\ntoken_file = \"t\"\n[tables]\nclinic = \"c.csv\"\nopen = \"o.csv\"\n[policy]\nrequire_dp = true\n[policy.tables]\nopen = \"none\"\n",
    )
    .unwrap();
    let err = WorkerConfig::from_args(&args)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("table `open`"), "{err}");
    // The cap alone changes no protection: it is allowed without a policy.
    assert!(
        WorkerConfig::from_args(&WorkerArgs {
            policy: Some("none".into()),
            dp_max_epsilon: Some(0.5),
            listen: Some("127.0.0.1:0".into()),
            token_file: Some(dir.path().join("t")),
            tables: vec!["clinic=c.csv".into()],
            ..Default::default()
        })
        .await
        .is_ok()
    );
}

#[tokio::test]
async fn the_fast_path_comes_from_the_toml_or_the_flag() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("secret.txt"), "tok\n").unwrap();
    let config = dir.path().join("worker.toml");
    let with = |toml: &str| {
        std::fs::write(
            &config,
            format!("listen = \"127.0.0.1:0\"\ntoken_file = \"secret.txt\"\n{toml}[tables]\nt = \"t.csv\"\n"),
        )
        .unwrap();
        WorkerArgs {
            config: Some(config.clone()),
            ..Default::default()
        }
    };
    let fast =
        |args: WorkerArgs| async move { WorkerConfig::from_args(&args).await.map(|c| c.fast_path) };
    assert!(fast(with("")).await.unwrap());
    assert!(!fast(with("fast_path = \"off\"\n")).await.unwrap());
    let flag = WorkerArgs {
        fast_path: Some("on".into()),
        ..with("fast_path = \"off\"\n")
    };
    assert!(fast(flag).await.unwrap());
    let e = fast(with("fast_path = \"maybe\"\n"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected 'on' or 'off'"), "{e}");
}

/// `docs/reference/worker-toml.md`, the reference of this file's keys.
fn reference_page() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/worker-toml.md");
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn every_key_and_flag_is_in_the_reference() {
    let page = reference_page();
    // The top-level keys, as serde lists them for an unknown one.
    let err = toml::from_str::<ConfigFile>("no_such_key = 1")
        .unwrap_err()
        .to_string();
    let listed = err.split_once("expected one of").expect(&err).1;
    let top: Vec<&str> = listed.split('`').skip(1).step_by(2).collect();
    assert!(top.contains(&"listen") && top.contains(&"tokens"), "{err}");
    // The `[policy]` keys: the disclosure and DP settings, and those
    // `worker_policy` and `worker_dp` read themselves.
    let policy = crate::site::release::policy::POLICY_KEYS
        .iter()
        .chain(crate::site::release::dp::DP_KEYS)
        .map(|k| k.trim_end_matches(".<column>"))
        .chain(["peers", "secure_without_peers", "dp_ledger", "tables"]);
    for key in top.iter().copied().chain(policy) {
        assert!(
            page.contains(&format!("| `{key}` |")),
            "worker-toml.md has no row for `{key}`"
        );
    }
    use clap::CommandFactory;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        worker: WorkerArgs,
    }
    for arg in Cli::command().get_arguments() {
        if let Some(long) = arg.get_long() {
            assert!(
                page.contains(&format!("`--{long}")),
                "worker-toml.md does not name --{long}"
            );
        }
    }
}

#[tokio::test]
async fn the_reference_example_is_a_valid_config() {
    let page = reference_page();
    let example = page
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a ```toml block");
    let dir = tempfile::TempDir::new().unwrap();
    let config = dir.path().join("worker.toml");
    std::fs::write(&config, example).unwrap();
    for (file, text) in [
        ("secret.token", "s3cret"),
        ("alice.token", "alice-token"),
        ("bob.token", "bob-token"),
        ("cert.pem", "certificate"),
        ("key.pem", "key"),
        ("admin.token", "admin-token-0123456789"),
    ] {
        std::fs::write(dir.path().join(file), text).unwrap();
    }
    let c = WorkerConfig::from_args(&WorkerArgs {
        config: Some(config),
        ..Default::default()
    })
    .await
    .unwrap();
    crate::site::worker::tokens::check_names(&c.token, &c.named_tokens).unwrap();
    assert_eq!(c.listen.port(), 50051);
    assert_eq!(c.tables.len(), 3);
    assert_eq!(c.named_tokens.len(), 2);
    assert!(c.tls.is_some() && c.identity.is_some());
    assert_eq!(c.peers.len(), 2);
    assert_eq!(c.limits, RequestLimits::default());
    assert_eq!(c.policy.as_ref().unwrap().min_group_rows, 10);
    assert_eq!(c.policy_of("rare_disease").unwrap().min_group_rows, 20);
    assert_eq!(c.dp.budget, Some(10.0));
    assert_eq!(c.dp.domains["region"].len(), 4);
    assert!(c.dp_ledger.is_some() && c.fast_path);
    let alice = c.profiles.of("alice").unwrap();
    assert_eq!(alice.min_group_rows, Some(15));
    assert_eq!(c.profiles.of("bob").unwrap().name, "default");
    assert!(c.approval_tables.contains("rare_disease"));
    assert_eq!(c.admin.as_ref().unwrap().0.port(), 50052);
}
