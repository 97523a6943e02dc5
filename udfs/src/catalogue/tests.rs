//! Tests of the catalogue: its reference page is current, and its facts
//! agree with the aggregates they describe.

use super::*;
use std::collections::HashSet;

#[test]
fn the_reference_page_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/reference/site-functions.md");
    let page = reference_markdown();
    if std::env::var_os("FEDSQL_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &page).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == page,
        "{} is not current: run FEDSQL_BLESS=1 cargo test -p fedsql-udfs catalogue",
        path.display()
    );
}

#[test]
fn names_are_unique_and_lower_case() {
    let mut seen = HashSet::new();
    for name in AGGREGATES
        .iter()
        .map(|a| a.name)
        .chain(SCALARS.iter().map(|s| s.name))
    {
        assert!(seen.insert(name), "{name} is catalogued twice");
        assert_eq!(name, name.to_ascii_lowercase());
    }
}

#[test]
fn every_fedsql_aggregate_is_catalogued() {
    for f in crate::all() {
        assert!(
            aggregate(f.name()).is_some(),
            "{} is not catalogued",
            f.name()
        );
    }
}

#[test]
fn every_fedsql_aggregate_is_documented() {
    for f in crate::all() {
        let documentation = f
            .documentation()
            .unwrap_or_else(|| panic!("{} has no documentation", f.name()));
        assert!(!documentation.description.is_empty(), "{}", f.name());
        assert!(
            documentation.syntax_example.starts_with(f.name()),
            "{}: {}",
            f.name(),
            documentation.syntax_example
        );
    }
}

#[test]
fn cells_of_a_kmeans_state() {
    let facts = aggregate("kmeans_step").unwrap();
    // Two arguments (config, one coordinate): blocks of 3 and a last value.
    let cells = (facts.cells.unwrap().counts)(2, &[4.0, 1.0, 0.5, 6.0, 2.0, 0.1, 9.0]).unwrap();
    assert_eq!(cells, vec![4.0, 6.0]);
    assert_eq!(aggregate("irls_step").unwrap().parameters(7), Some(2));
    assert_eq!(aggregate("sum").unwrap().parameters(1), None);
}
