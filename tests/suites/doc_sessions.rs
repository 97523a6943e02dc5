//! The documentation cannot drift (issue 52): every example session in
//! `README.md` and `docs/` runs against the demo and must print what the
//! page shows; the README stays a front page; no heading carries a date.
//!
//! A session is a fenced code block with a line starting `fedsql> `. Each
//! statement starts on such a line (continuation lines start `     -> `, as
//! the REPL prints them); the lines after it, up to the next prompt, are its
//! output as the REPL prints it with `\timing` off ("N row(s) fetched." and
//! "Elapsed" lines may be left out). Lines before the first prompt (a `$`
//! command) are not read. A block whose info string holds `not-run` is not
//! run (it needs a worker, a file not shipped, or its output is random).
//! The statements of one block share a session over a fresh demo; blocks
//! do not share.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fedsql::FedContext;
use fedsql::frontend::repl::{ReplOptions, Session};

/// The REPL's prompt and its continuation prompt.
const PROMPT: &str = "fedsql> ";
const MORE: &str = "     -> ";

/// One statement of a session and what the page shows it prints.
#[derive(Debug)]
struct Step {
    input: String,
    output: Vec<String>,
}

/// One session block: where it is, and its steps.
#[derive(Debug)]
struct Block {
    place: String,
    steps: Vec<Step>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/, sorted.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![repo().join("README.md")];
    let mut stack = vec![repo().join("docs")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The fenced blocks of a page: (first line number, info string, lines).
fn fenced(text: &str) -> Vec<(usize, String, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String, String, Vec<String>)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                if let Some(rest) = trimmed.strip_prefix("```") {
                    open = Some((n + 1, "```".into(), rest.trim().to_string(), Vec::new()));
                } else if let Some(rest) = trimmed.strip_prefix("~~~") {
                    open = Some((n + 1, "~~~".into(), rest.trim().to_string(), Vec::new()));
                }
            }
            Some((start, fence, info, lines)) => {
                if trimmed.starts_with(fence.as_str()) && trimmed.trim_end() == fence.as_str() {
                    blocks.push((*start, std::mem::take(info), std::mem::take(lines)));
                    open = None;
                } else {
                    lines.push(line.to_string());
                }
            }
        }
    }
    blocks
}

/// The session blocks of a page.
fn sessions(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).unwrap();
    let name = path
        .strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string();
    fenced(&text)
        .into_iter()
        .filter(|(_, info, lines)| {
            !info.contains("not-run") && lines.iter().any(|l| l.starts_with(PROMPT))
        })
        .map(|(start, _, lines)| {
            let mut steps: Vec<Step> = Vec::new();
            for line in lines.iter().skip_while(|l| !l.starts_with(PROMPT)) {
                if let Some(input) = line.strip_prefix(PROMPT) {
                    steps.push(Step {
                        input: input.to_string(),
                        output: Vec::new(),
                    });
                    continue;
                }
                let step = steps.last_mut().expect("after a prompt");
                match line.strip_prefix(MORE) {
                    Some(more) if step.output.is_empty() => {
                        step.input.push('\n');
                        step.input.push_str(more);
                    }
                    _ => step.output.push(line.clone()),
                }
            }
            Block {
                place: format!("{name}:{start}"),
                steps,
            }
        })
        .collect()
}

/// Output lines as compared: without trailing blanks and spaces, the
/// row-count and elapsed-time lines, and blank lines at the end.
fn normal(lines: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = lines
        .into_iter()
        .map(|l| l.trim_end().to_string())
        .filter(|l| {
            !(l.starts_with("Elapsed ") || l.ends_with(" row(s) fetched.") || l == "0 rows.")
        })
        .collect();
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    out
}

/// The session's diagnostics (messages and errors in a machine format, which
/// the REPL writes to stderr), kept to be read after each step.
#[derive(Clone, Default)]
struct Diagnostics(Arc<Mutex<Vec<u8>>>);

impl Write for Diagnostics {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs one block over a fresh demo; the differences, described.
async fn run(block: &Block) -> Vec<String> {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo(&ctx).unwrap();
    let mut session = Session::new(
        &ctx,
        ReplOptions {
            timing: false,
            ..ReplOptions::default()
        },
    );
    let diagnostics = Diagnostics::default();
    session.set_diagnostics(Box::new(diagnostics.clone()));
    let mut bad = Vec::new();
    for step in &block.steps {
        let mut out = Vec::new();
        session.run_text(&step.input, &mut out).await.unwrap();
        // What the page shows is what a terminal shows: the result, then
        // what went to stderr.
        out.append(&mut diagnostics.0.lock().unwrap());
        let got = normal(String::from_utf8(out).unwrap().lines().map(str::to_string));
        let want = normal(step.output.iter().cloned());
        if got != want {
            bad.push(format!(
                "{}: `{}`\n--- the page shows\n{}\n--- fedsql prints\n{}",
                block.place,
                step.input,
                want.join("\n"),
                got.join("\n")
            ));
        }
    }
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_session_prints_what_the_page_shows() {
    let blocks: Vec<Block> = pages().iter().flat_map(|p| sessions(p)).collect();
    assert!(
        blocks.len() >= 20,
        "only {} sessions found: is the convention still `fedsql> `?",
        blocks.len()
    );
    let mut bad = Vec::new();
    for block in &blocks {
        bad.extend(run(block).await);
    }
    assert!(
        bad.is_empty(),
        "{} of the documented statements print something else \
         (fix the page, or mark a block that cannot run `text not-run`):\n\n{}",
        bad.len(),
        bad.join("\n\n")
    );
}

#[test]
fn the_readme_is_a_front_page() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines (at most 250)");
}

#[test]
fn no_heading_carries_a_date() {
    let mut bad = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut in_fence = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_fence = !in_fence;
            }
            let dated = line.as_bytes().windows(10).any(|w| {
                w.iter().enumerate().all(|(i, b)| match i {
                    4 | 7 => *b == b'-',
                    _ => b.is_ascii_digit(),
                })
            });
            if !in_fence && line.starts_with('#') && dated {
                bad.push(format!("{}:{}: {line}", page.display(), n + 1));
            }
        }
    }
    assert!(bad.is_empty(), "dated headings:\n{}", bad.join("\n"));
}

#[test]
fn the_parser_reads_prompts_continuations_and_output() {
    let dir = std::env::temp_dir().join(format!("fedsql-doc-sessions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("page.md");
    std::fs::write(
        &page,
        "text\n```\n$ fedsql\nfedsql> SELECT 1\n     -> AS x;\n+---+\n| x |\n\nfedsql> \\q\n```\n\
         ```text not-run\nfedsql> SELECT 2;\n```\n```sql\nSELECT 3;\n```\n",
    )
    .unwrap();
    let blocks = sessions(&page);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(blocks.len(), 1);
    let steps = &blocks[0].steps;
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].input, "SELECT 1\nAS x;");
    assert_eq!(normal(steps[0].output.clone()), ["+---+", "| x |"]);
    assert_eq!(steps[1].input, "\\q");
}

#[test]
fn every_relative_link_resolves() {
    let mut bad = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut in_fence = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_fence = !in_fence;
            }
            if in_fence {
                continue;
            }
            for (at, _) in line.match_indices("](") {
                let rest = &line[at + 2..];
                let Some(end) = rest.find(')') else { continue };
                let target = rest[..end].split('#').next().unwrap_or("");
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                if !page.parent().unwrap().join(target).exists() {
                    bad.push(format!("{}:{}: {target}", page.display(), n + 1));
                }
            }
        }
    }
    assert!(bad.is_empty(), "links to nothing:\n{}", bad.join("\n"));
}
