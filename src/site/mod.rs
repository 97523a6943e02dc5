//! Everything that runs at a data owner, and nothing else.
//!
//! A *site* holds the rows of a federated table: an embedded folder of
//! files run in the analyst's process ([`local`]), or a `fedsql worker`
//! run by the data owner ([`worker`]). A site answers the interface in
//! [`runner`]: a validated encoder in, one aggregate state out. Whatever
//! protects a data owner is enforced here, on the state before it leaves.
//!
//! This folder depends on [`crate::wire`] (what both sides agree on), the
//! error type and the UDF crate only — never on the coordinator's modules
//! (a test in this module checks that).

pub mod engine;
pub mod files;
pub mod local;
pub mod release;
pub mod runner;
pub mod worker;

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Modules of the crate that a site may use.
    const SITE_MAY_USE: &[&str] = &["site", "wire", "error"];
    /// Modules of the crate that the wire may use.
    const WIRE_MAY_USE: &[&str] = &["wire", "error"];

    /// Every `crate::<module>` path a source file names.
    fn crate_modules(text: &str) -> Vec<String> {
        let mut found = Vec::new();
        for (at, _) in text.match_indices("crate::") {
            let before = text[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // e.g. `fedsql_crate::`
            }
            let module: String = text[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !module.is_empty() {
                found.push(module);
            }
        }
        found
    }

    /// Files under `dir` (recursively) that use a crate module not in `allowed`.
    fn violations(dir: &Path, allowed: &[&str]) -> Vec<String> {
        let mut bad = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(path) = stack.pop() {
            if path.is_dir() {
                stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for module in crate_modules(&text) {
                    if !allowed.contains(&module.as_str()) {
                        bad.push(format!("{} uses crate::{module}", path.display()));
                    }
                }
            }
        }
        bad.sort();
        bad.dedup();
        bad
    }

    #[test]
    fn the_site_and_the_wire_use_no_coordinator_module() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut bad = violations(&src.join("site"), SITE_MAY_USE);
        bad.extend(violations(&src.join("wire"), WIRE_MAY_USE));
        assert!(
            bad.is_empty(),
            "the site side must stand on its own:\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn the_check_sees_a_violation() {
        // Written so that this file does not name the module it tests for.
        let text = format!(
            "use {0}::wire::encoder::Encoder;\nuse {0}::coordinator::rounds;",
            "crate"
        );
        assert_eq!(crate_modules(&text), ["wire", "coordinator"]);
        assert_eq!(crate_modules("fedsql_crate::x"), Vec::<String>::new());
    }
}
