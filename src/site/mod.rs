//! Everything that runs at a data owner, and nothing else.
//!
//! A *site* holds the rows of a federated table: an embedded folder of
//! files run in the analyst's process ([`local`]), or a `fedsql worker`
//! run by the data owner ([`worker`]). A site answers the interface in
//! [`crate::protocol::site`]: a request (a validated encoder and the
//! analyst it runs for) in, one aggregate state out. Whatever
//! protects a data owner is enforced here, on the state before it leaves.
//!
//! It is split by job: [`release`] decides what may leave (a data
//! protection officer's reading), [`engine`] makes it fast (templates,
//! the site's own small-Parquet reader, rows kept between a fit's rounds;
//! switchable per table or worker), and [`local`] is the pipeline that
//! runs one through the other.
//!
//! This folder depends on [`crate::protocol`] (what both sides agree on), the
//! error type and the UDF crate only — never on the coordinator's modules;
//! and [`release`] uses nothing of [`engine`] (tests in this module check
//! both).

#[cfg(feature = "ballista")]
pub mod ballista;
pub mod cluster;
pub mod engine;
pub(crate) mod files;
pub(crate) mod in_process;
pub mod local;
pub mod release;
pub mod worker;

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Modules of the crate that a site may use.
    const SITE_MAY_USE: &[&str] = &["site", "protocol", "error"];
    /// Modules of the crate that the protocol may use.
    const PROTOCOL_MAY_USE: &[&str] = &["protocol", "error"];

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
    fn the_site_and_the_protocol_use_no_coordinator_module() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut bad = violations(&src.join("site"), SITE_MAY_USE);
        bad.extend(violations(&src.join("protocol"), PROTOCOL_MAY_USE));
        assert!(
            bad.is_empty(),
            "the site side must stand on its own:\n{}",
            bad.join("\n")
        );
    }

    /// The items of `site::engine` that `site::release` may use: none (the
    /// engine uses the release rules, never the other way round).
    const RELEASE_MAY_USE_OF_ENGINE: &[&str] = &[];

    /// Every item of the engine a source file's code names
    /// (`site::engine::x`, `site::engine::{x, y}`), as `x` or `module::x`;
    /// the module itself when named alone. Comments (doc links) use
    /// nothing, and are skipped.
    fn engine_items(text: &str) -> Vec<String> {
        let code: String = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut found = Vec::new();
        for (at, _) in code.match_indices("site::engine") {
            let rest = &code[at + "site::engine".len()..];
            let Some(rest) = rest.strip_prefix("::") else {
                found.push("(the module itself)".to_string());
                continue;
            };
            let item: String = match rest.strip_prefix('{') {
                Some(group) => group[..group.find('}').unwrap_or(group.len())].to_string(),
                None => rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect(),
            };
            found.extend(
                item.split(',')
                    .map(|i| i.split_whitespace().collect::<String>())
                    .filter(|i| !i.is_empty()),
            );
        }
        found
    }

    #[test]
    fn what_may_leave_uses_only_the_named_interfaces_of_the_engine() {
        let release = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/site/release");
        let mut bad = Vec::new();
        let mut stack = vec![release];
        while let Some(path) = stack.pop() {
            if path.is_dir() {
                stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for item in engine_items(&text) {
                    if !RELEASE_MAY_USE_OF_ENGINE.contains(&item.as_str()) {
                        bad.push(format!("{} uses site::engine::{item}", path.display()));
                    }
                }
                // Nor by a relative path around the check.
                if text.contains("super::super::engine") || text.contains("super::engine") {
                    bad.push(format!(
                        "{} names the engine by a relative path",
                        path.display()
                    ));
                }
            }
        }
        assert!(
            bad.is_empty(),
            "site/release/ may use of site/engine/ only {RELEASE_MAY_USE_OF_ENGINE:?}:\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn the_engine_check_sees_every_item() {
        let text = format!(
            "use {0}::engine::file_scan;\nuse {0}::engine::{{SiteEngine, small_parquet::SMALL_FILE}};\n{0}::engine::kept_rows::KeptRows\nuse {0}::engine;\n/// [`{0}::engine::Template`]",
            "crate::site"
        );
        assert_eq!(
            engine_items(&text),
            [
                "file_scan",
                "SiteEngine",
                "small_parquet::SMALL_FILE",
                "kept_rows::KeptRows",
                "(the module itself)"
            ]
        );
    }

    #[test]
    fn the_check_sees_a_violation() {
        // Written so that this file does not name the module it tests for.
        let text = format!(
            "use {0}::protocol::encoder::Encoder;\nuse {0}::coordinator::rounds;",
            "crate"
        );
        assert_eq!(crate_modules(&text), ["protocol", "coordinator"]);
        assert_eq!(crate_modules("fedsql_crate::x"), Vec::<String>::new());
    }
}
