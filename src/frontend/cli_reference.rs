//! The command-line reference page, `docs/reference/cli.md`, generated
//! from the same clap definitions that parse the command line ([`Args`],
//! as `fedsql man` is) and from the REPL's table of backslash commands
//! ([`COMMANDS`]), so that the page cannot drift from the program: a test
//! regenerates it and fails when the committed page differs
//! (`FEDSQL_BLESS=1 cargo test --lib -p fedsql cli_reference` rewrites it).
//! The page is the only use of this module, so it is built with the tests.

use clap::{Arg, ArgAction, CommandFactory};

use crate::frontend::cli::Args;
use crate::frontend::repl::command::COMMANDS;

/// The page's path, relative to the repository root.
pub(crate) const PAGE: &str = "docs/reference/cli.md";

/// The CLI reference as Markdown: `fedsql` and each subcommand with every
/// flag (its value, default and help), then the REPL's commands.
pub(crate) fn markdown() -> String {
    let mut root = Args::command();
    root.build();
    let mut page = String::from(
        "# Command line\n\n\
         The `fedsql` command and its subcommands, with every flag, its value, its default \
         and what it does, followed by the backslash commands of the interactive session. \
         This page is generated from the program's own definitions (the ones `fedsql --help` \
         and `fedsql man` print); after changing them, run \
         `FEDSQL_BLESS=1 cargo test --lib -p fedsql cli_reference` to rewrite it.\n\n",
    );
    page.push_str("| command | what it does |\n|---|---|\n");
    page.push_str(&format!(
        "| [`fedsql`](#fedsql) | {} |\n",
        cell(&about(&root))
    ));
    for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
        page.push_str(&format!(
            "| [`fedsql {name}`](#fedsql-{name}) | {} |\n",
            cell(&about(sub)),
            name = sub.get_name()
        ));
    }
    page.push('\n');
    let names: Vec<String> = root
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_string())
        .collect();
    command_section(&mut page, &mut root, "fedsql");
    for name in names {
        let sub = root.find_subcommand_mut(&name).expect("listed above");
        command_section(&mut page, sub, &format!("fedsql {name}"));
    }
    page.push_str(
        "## Commands of the interactive session\n\n\
         In the REPL (and in `-c`, `-f` and start-up files), a line that starts with `\\` \
         is a command: it needs no `;`, and it ends the SQL typed before it (`\\g` runs \
         that statement, `\\r` forgets it, any other command leaves it pending). `\\?` \
         prints this table.\n\n\
         | command | what it does |\n|---|---|\n",
    );
    for (usage, about) in COMMANDS {
        page.push_str(&format!("| `{}` | {} |\n", cell(usage), cell(about)));
    }
    page
}

/// One command's section: its description, usage and flags.
fn command_section(page: &mut String, cmd: &mut clap::Command, title: &str) {
    page.push_str(&format!("## {title}\n\n{}\n\n", prose(&long_about(cmd))));
    let usage = cmd.render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    page.push_str(&format!("```text\n{usage}\n```\n\n"));
    let args: Vec<&Arg> = cmd.get_arguments().filter(|a| !a.is_hide_set()).collect();
    if !args.is_empty() {
        page.push_str("| flag | value | default | description |\n|---|---|---|---|\n");
        for arg in args {
            page.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                flag(arg),
                value(arg),
                default(arg),
                description(arg)
            ));
        }
        page.push('\n');
    }
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        page.push_str(&after_help(&after.to_string()));
    }
}

/// The text after the flags, paragraph by paragraph: a paragraph whose
/// lines after the first are `  CODE  meaning` (the exit codes) becomes a
/// table under its first line; any other is prose on one line.
fn after_help(text: &str) -> String {
    let mut page = String::new();
    for paragraph in text.split("\n\n") {
        let mut lines = paragraph.lines();
        let first = lines.next().unwrap_or_default();
        let rows: Vec<(&str, &str)> = lines
            .filter_map(|line| {
                let (code, meaning) = line.trim_start().split_once("  ")?;
                code.parse::<u8>().ok().map(|_| (code, meaning.trim()))
            })
            .collect();
        if rows.is_empty() || rows.len() + 1 != paragraph.lines().count() {
            page.push_str(&format!("{}\n\n", prose(&one_line(paragraph))));
            continue;
        }
        page.push_str(&format!(
            "{}\n\n| code | meaning |\n|---|---|\n",
            prose(&one_line(first))
        ));
        for (code, meaning) in rows {
            page.push_str(&format!("| {code} | {} |\n", cell(meaning)));
        }
        page.push('\n');
    }
    page
}

/// `-c`, `--command` (or the positional argument's name).
fn flag(arg: &Arg) -> String {
    if arg.is_positional() {
        return format!("`{}` (argument)", value_names(arg));
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("`-{short}`"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("`--{long}`"));
    }
    names.join(", ")
}

fn value_names(arg: &Arg) -> String {
    match arg.get_value_names() {
        Some(names) => names
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        None => arg.get_id().as_str().to_ascii_uppercase(),
    }
}

/// The value a flag takes (the possible values, when there is a fixed
/// list), or nothing for a switch.
fn value(arg: &Arg) -> String {
    if !takes_value(arg) {
        return String::new();
    }
    let possible = arg.get_possible_values();
    let shown: Vec<String> = possible
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| format!("`{}`", p.get_name()))
        .collect();
    let mut text = if shown.is_empty() {
        format!("`{}`", cell(&value_names(arg)))
    } else {
        shown.join(", ")
    };
    if matches!(arg.get_action(), ArgAction::Append) {
        text.push_str(" (repeatable)");
    }
    text
}

fn takes_value(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Set | ArgAction::Append)
}

fn default(arg: &Arg) -> String {
    if !takes_value(arg) {
        // A switch's `false` says nothing.
        return String::new();
    }
    arg.get_default_values()
        .iter()
        .map(|v| format!("`{}`", v.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The flag's full help, then what each of its possible values means.
fn description(arg: &Arg) -> String {
    let mut text = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| sentence(&h.to_string()))
        .unwrap_or_default();
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .filter_map(|p| {
            p.get_help()
                .map(|h| format!("`{}`: {}", p.get_name(), one_line(&h.to_string())))
        })
        .collect();
    if !values.is_empty() {
        text.push_str(&format!(" {}.", values.join("; ")));
    }
    cell(&prose(&text))
}

fn about(cmd: &clap::Command) -> String {
    cmd.get_about()
        .or(cmd.get_long_about())
        .map(|a| prose(&one_line(&a.to_string())))
        .unwrap_or_default()
}

fn long_about(cmd: &clap::Command) -> String {
    cmd.get_long_about()
        .or(cmd.get_about())
        .map(|a| sentence(&a.to_string()))
        .unwrap_or_default()
}

/// Help text on one line (clap keeps the doc comment's line breaks).
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Help text on one line, ending as a sentence (clap drops the final
/// period of a one-sentence doc comment).
fn sentence(text: &str) -> String {
    let mut line = one_line(text);
    if !line.is_empty() && !line.ends_with(['.', ')', ':', '?', '!']) {
        line.push('.');
    }
    line
}

/// Help text as Markdown prose: a backslash outside a code span (`\?`)
/// would escape the next character, so it is doubled.
fn prose(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 0 {
                part.replace('\\', "\\\\")
            } else {
                part.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

/// Text for a Markdown table cell: a `|` would end the cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_reference_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
        let page = markdown();
        if std::env::var_os("FEDSQL_BLESS").is_some() {
            std::fs::write(&path, &page).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == page,
            "{PAGE} is not current: run FEDSQL_BLESS=1 cargo test --lib -p fedsql cli_reference"
        );
    }

    #[test]
    fn cli_reference_names_every_subcommand_flag_and_repl_command() {
        let page = markdown();
        let root = Args::command();
        for sub in root.get_subcommands() {
            let title = format!("## fedsql {}\n", sub.get_name());
            assert!(page.contains(&title), "{title}");
        }
        for cmd in std::iter::once(&root).chain(root.get_subcommands()) {
            for arg in cmd.get_arguments() {
                if let Some(long) = arg.get_long() {
                    assert!(page.contains(&format!("`--{long}`")), "--{long}");
                }
            }
        }
        for (usage, _) in COMMANDS {
            assert!(page.contains(&cell(usage)), "{usage}");
        }
    }
}
