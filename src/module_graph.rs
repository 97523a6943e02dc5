//! A test of the crate's layering: no import circle between top-level
//! modules, nor between the files (and subfolders) of one folder.
//!
//! It reads every file under `src/` (the library crate: not `main.rs` nor
//! `src/bin/`), finds the module paths its code names (`crate::a::b`,
//! `super::x`, `self::y`, `use crate::a::{b, c::d}`, and in a `mod.rs` the
//! bare names of its own submodules), resolves each to the longest prefix
//! that is a module file, and looks for circles. It discovers the modules,
//! so it survives files moving. Test code (from the first `#[cfg(test)]`
//! of a file on), files named `tests.rs` (a module's tests moved beside
//! it, declared under `#[cfg(test)]`) and comments are not read: a test
//! may reach anywhere.
//! The crate root (`lib.rs`) only re-exports, so it is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module path, `["models", "glm"]`; the crate root is `[]`.
type Module = Vec<String>;

/// Every module file under `src` (the library crate), by module path.
fn modules(src: &Path) -> BTreeMap<Module, String> {
    let mut found = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(path) = stack.pop() {
        let relative = path.strip_prefix(src).unwrap();
        if relative.starts_with("bin")
            || relative == Path::new("main.rs")
            || path.file_name().is_some_and(|name| name == "tests.rs")
        {
            continue;
        }
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let mut module: Module = relative
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            found.insert(module, std::fs::read_to_string(&path).unwrap());
        }
    }
    found
}

/// The code of a file: before its first `#[cfg(test)]`, without comments.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths named in `code` that start with one of `roots`, each as its
/// segments (`use crate::a::{b, c::d}` gives `crate::a::b` and
/// `crate::a::c::d`).
fn paths(code: &str, roots: &[&str]) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let starts_path = (at == 0 || !(is_ident(chars[at - 1]) || chars[at - 1] == ':'))
            && roots.iter().any(|root| {
                let word: String = chars[at..].iter().take(root.len() + 2).collect();
                word == format!("{root}::")
            });
        if starts_path {
            at = read_path(&chars, at, Vec::new(), &mut found);
        } else {
            at += 1;
        }
    }
    found
}

/// Reads a path at `at` (its segments after `prefix`), with its groups;
/// pushes every full path onto `found` and returns where it ends.
fn read_path(
    chars: &[char],
    mut at: usize,
    prefix: Vec<String>,
    found: &mut Vec<Vec<String>>,
) -> usize {
    let skip_space = |mut at: usize| {
        while chars.get(at).is_some_and(|c| c.is_whitespace()) {
            at += 1;
        }
        at
    };
    let word = |start: usize| {
        let mut end = start;
        while chars.get(end).is_some_and(|c| is_ident(*c)) {
            end += 1;
        }
        (chars[start..end].iter().collect::<String>(), end)
    };
    let mut path = prefix;
    loop {
        at = skip_space(at);
        if chars.get(at) == Some(&'{') {
            at += 1;
            loop {
                at = skip_space(at);
                if chars.get(at) == Some(&'}') {
                    return at + 1;
                }
                at = read_path(chars, at, path.clone(), found);
                at = skip_space(at);
                if word(at).0 == "as" {
                    at = word(skip_space(word(at).1)).1;
                    at = skip_space(at);
                }
                match chars.get(at) {
                    Some(',') => at += 1,
                    Some('}') => return at + 1,
                    _ => return at,
                }
            }
        }
        let (segment, end) = word(at);
        at = end;
        if !segment.is_empty() {
            path.push(segment);
        } else if chars.get(at) == Some(&'*') {
            at += 1;
        }
        if !segment_follows(chars, at) {
            found.push(path);
            return at;
        }
        at += 2;
    }
}

/// Whether `::` follows at `at`.
fn segment_follows(chars: &[char], at: usize) -> bool {
    chars.get(at) == Some(&':') && chars.get(at + 1) == Some(&':')
}

/// The modules each module's code uses (the crate root left out).
fn edges(modules: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, text) in modules {
        if module.is_empty() {
            continue;
        }
        let code = code(text);
        // A folder's own submodules, named bare in its `mod.rs`.
        let children: Vec<String> = modules
            .keys()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
            .map(|m| m.last().unwrap().clone())
            .collect();
        let mut roots = vec!["crate", "super", "self"];
        roots.extend(children.iter().map(String::as_str));
        for path in paths(&code, &roots) {
            let (mut base, rest): (Module, &[String]) = match path[0].as_str() {
                "crate" => (Vec::new(), &path[1..]),
                "super" => (module[..module.len() - 1].to_vec(), &path[1..]),
                "self" => (module.clone(), &path[1..]),
                _ => (module.clone(), &path[..]),
            };
            let mut rest = rest;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            let target = (0..=base.len())
                .rev()
                .map(|n| base[..n].to_vec())
                .find(|m| modules.contains_key(m));
            if let Some(target) = target
                && !target.is_empty()
                && target != *module
            {
                out.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    out
}

/// For each folder, the graph between its entries (files and subfolders;
/// the folder's own `mod.rs` is `mod`): an edge of two modules counts in
/// the deepest folder holding both.
fn folder_graphs(
    edges: &BTreeMap<Module, BTreeSet<Module>>,
) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, targets) in edges {
        for to in targets {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            let entry = |m: &Module| m.get(common).cloned().unwrap_or_else(|| "mod".into());
            let (a, b) = (entry(from), entry(to));
            if a != b {
                out.entry(from[..common].join("/"))
                    .or_default()
                    .entry(a)
                    .or_default()
                    .insert(b);
            }
        }
    }
    out
}

/// The circles of a graph: each set of nodes that reach one another.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |start: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.clone()];
        while let Some(node) = stack.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|n| (n, reach(n))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for (node, seen) in &reached {
        if !seen.contains(*node) || out.iter().any(|c| c.contains(node)) {
            continue;
        }
        out.push(
            seen.iter()
                .filter(|other| reached.get(other).is_some_and(|r| r.contains(*node)))
                .cloned()
                .collect(),
        );
    }
    out
}

/// Every circle, described.
fn violations(src: &Path) -> Vec<String> {
    let graphs = folder_graphs(&edges(&modules(src)));
    let mut bad = Vec::new();
    for (folder, graph) in &graphs {
        for circle in circles(graph) {
            let links: Vec<String> = circle
                .iter()
                .flat_map(|a| {
                    graph[a]
                        .iter()
                        .filter(|b| circle.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            let place = if folder.is_empty() {
                "top-level modules".to_string()
            } else {
                format!("src/{folder}/")
            };
            bad.push(format!("{place}: {}", links.join(", ")));
        }
    }
    bad
}

#[test]
fn no_import_circle_between_modules_or_files_of_a_folder() {
    let bad = violations(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(bad.is_empty(), "import circles:\n{}", bad.join("\n"));
}

#[test]
fn the_scan_reads_groups_and_relative_paths() {
    let text = format!(
        "use {c}::a::{{b, c::{{d, e}}}};\nuse {s}::f;\nlet x = {c}::g::h(1); // {c}::skipped\n",
        c = "crate",
        s = "super"
    );
    let found: Vec<String> = paths(&code(&text), &["crate", "super"])
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        found,
        [
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c::e",
            "super::f",
            "crate::g::h"
        ]
    );
}

#[test]
fn the_scan_finds_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", &["b"][..]),
        ("b", &["c"][..]),
        ("c", &["a"][..]),
        ("d", &["a"][..]),
    ]
    .into_iter()
    .map(|(n, to)| (n.to_string(), to.iter().map(|t| t.to_string()).collect()))
    .collect();
    assert_eq!(circles(&graph), [["a", "b", "c"]]);
}
