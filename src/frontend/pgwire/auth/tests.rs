//! Tests of who may connect: verifiers in PostgreSQL's form, the users
//! file, and SCRAM-SHA-256.

use super::*;

#[test]
fn verifier_round_trips_and_matches_postgres_form() {
    let v = Verifier::new("s3cret").unwrap();
    let text = v.encode();
    assert!(text.starts_with("SCRAM-SHA-256$4096:"));
    assert_eq!(Verifier::parse(&text), Some(v));
    assert_eq!(Verifier::parse("md5abc"), None);
}

#[test]
fn users_file_round_trips() {
    let mut users = Users::default();
    users.set("alice", Verifier::new("a").unwrap());
    users.set("bob smith", Verifier::new("b").unwrap());
    let back = Users::parse(&users.to_toml()).unwrap();
    assert_eq!(back.get("alice"), users.get("alice"));
    assert_eq!(back.get("bob smith"), users.get("bob smith"));
    assert!(Users::parse("[users]\nalice = \"plain\"\n").is_err());
}

/// A user's table form holds their worker token file (relative to the
/// users file); `fedsql passwd` keeps it; a user without one, or a key
/// the file does not know, is refused.
#[test]
fn users_file_tables_hold_the_worker_token_file() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("bob.token"), "bob-token\n").unwrap();
    let file = dir.path().join("users.toml");
    let verifier = Verifier::new("b").unwrap().encode();
    std::fs::write(
        &file,
        format!(
            "[users]\nalice = \"{verifier}\"\n[users.bob]\nverifier = \"{verifier}\"\ntoken_file = \"bob.token\"\n"
        ),
    )
    .unwrap();
    let users = Users::load(&file).unwrap();
    assert!(matches!(users.worker_token("bob"), Credential::Own(t) if &*t == "bob-token"));
    assert!(matches!(users.worker_token("alice"), Credential::Missing));
    set_password(&file, "alice", "a").unwrap();
    let again = Users::load(&file).unwrap();
    assert!(matches!(again.worker_token("bob"), Credential::Own(t) if &*t == "bob-token"));
    assert_ne!(again.get("alice"), users.get("alice"));
    assert!(
        Users::parse(&format!(
            "[users.bob]\nverifier = \"{verifier}\"\ntokenfile = \"x\"\n"
        ))
        .is_err()
    );
    std::fs::write(
        &file,
        format!("[users.bob]\nverifier = \"{verifier}\"\ntoken_file = \"missing.token\"\n"),
    )
    .unwrap();
    let e = Users::load(&file).unwrap_err().to_string();
    assert!(e.contains("token_file of user `bob`"), "{e}");
}

/// The client side of RFC 5802, to check the server against.
fn client_final(password: &str, client_first_bare: &str, server_first: &str) -> String {
    let attrs: BTreeMap<&str, &str> = server_first
        .split(',')
        .filter_map(|a| a.split_once('='))
        .collect();
    let salt = B64.decode(attrs["s"]).unwrap();
    let iterations: u32 = attrs["i"].parse().unwrap();
    let salted = salted_password(password, &salt, iterations);
    let client_key = hmac_sha256(&salted, b"Client Key");
    let stored_key = digest::digest(&digest::SHA256, &client_key);
    let without_proof = format!("c={},r={}", B64.encode("n,,"), attrs["r"]);
    let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
    let signature = hmac_sha256(stored_key.as_ref(), auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(signature)
        .map(|(a, b)| a ^ b)
        .collect();
    format!("{without_proof},p={}", B64.encode(proof))
}

#[test]
fn scram_accepts_the_password_and_refuses_others() {
    let verifier = Verifier::new("pencil").unwrap();
    let mut users = Users::default();
    users.set("user", verifier.clone());
    let bare = "n=,r=rOprNGfwEbeRWgbNEkqO";
    let exchange = ScramExchange::start(
        &format!("n,,{bare}"),
        Some(verifier.clone()),
        users.salt_and_iterations("user"),
    )
    .unwrap();
    let good = client_final("pencil", bare, &exchange.server_first);
    assert!(exchange.finish(&good).unwrap().starts_with("v="));
    let bad = client_final("pen", bare, &exchange.server_first);
    assert!(exchange.finish(&bad).is_none());
    let unknown = ScramExchange::start(
        &format!("n,,{bare}"),
        None,
        users.salt_and_iterations("nobody"),
    )
    .unwrap();
    let guess = client_final("pencil", bare, &unknown.server_first);
    assert!(unknown.finish(&guess).is_none());
}

/// The salt offered to an unknown name is stable, differs between
/// names and between servers, and looks like a known user's.
#[test]
fn unknown_users_get_a_stable_salt_shaped_like_a_known_one() {
    let mut users = Users::default();
    users.set("alice", Verifier::with_salt("a", vec![7; 16], 4096));
    users.set("bob", Verifier::with_salt("b", vec![9; 16], 4096));
    let (salt, iterations) = users.salt_and_iterations("mallory");
    assert_eq!(users.salt_and_iterations("mallory"), (salt.clone(), 4096));
    assert_eq!(salt.len(), 16);
    assert_eq!(iterations, 4096);
    assert_ne!(users.salt_and_iterations("eve").0, salt);
    assert_eq!(users.salt_and_iterations("alice"), (vec![7; 16], 4096));
    // Another server (other verifiers) answers the same name otherwise.
    let mut other = Users::default();
    other.set("alice", Verifier::with_salt("a", vec![7; 16], 4096));
    assert_ne!(other.salt_and_iterations("mallory").0, salt);
    // The users' own iteration count, not the default.
    let mut slow = Users::default();
    slow.set("carol", Verifier::with_salt("c", vec![1; 20], 10000));
    let (salt, iterations) = slow.salt_and_iterations("mallory");
    assert_eq!((salt.len(), iterations), (20, 10000));
}
