//! The documents' commands run as written: every `llamay` line of a code block in README.md or
//! `docs/*.md` that needs no daemon, no network and no change to the store (`run` with a prompt,
//! `grammar`, `schema` and `lexicon check`, `list`, `show`) is run from the repository root
//! through `sh`, with the llamay binary under test first on PATH. A line whose comment says
//! `exit 1` must exit 1. README.md stays a front door: at most 200 lines, every link to `docs/`
//! names a file that exists, and every file of `docs/` is linked from it.

use std::path::Path;
use std::process::Command;

use llamay_test_support::process::{llamay_binary, llamay_command};

/// Subcommands that need no daemon and change nothing.
const RUNNABLE: &[&str] = &["run", "grammar", "schema", "lexicon", "list", "show"];

/// README.md's longest allowed length: what llamay is, the two set-up commands, one example per
/// API and links; the reference lives in `docs/`.
const README_MAX_LINES: usize = 200;

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, then every `docs/*.md` in name order: (file name, text).
fn documents() -> Vec<(String, String)> {
    let mut documents = vec![("README.md".to_string(), std::fs::read_to_string(repository().join("README.md")).expect("README.md"))];
    let mut pages: Vec<_> = std::fs::read_dir(repository().join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("docs entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    for page in pages {
        let name = format!("docs/{}", page.file_name().expect("name").to_string_lossy());
        documents.push((name, std::fs::read_to_string(&page).expect("docs page")));
    }
    documents
}

fn readme_commands() -> Vec<String> {
    documents()
        .iter()
        .flat_map(|(_, text)| text.lines().map(str::to_string).collect::<Vec<_>>())
        .filter(|line| line.starts_with("    llamay ") || line.starts_with("llamay "))
        .map(|line| line.trim().to_string())
        .filter(|line| {
            let subcommand = line.split_whitespace().nth(1).unwrap_or("");
            RUNNABLE.contains(&subcommand) && (subcommand != "run" || line.contains(" -p "))
        })
        .collect()
}

fn has(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success())
}

#[test]
fn the_readme_is_a_front_door_that_links_every_page_of_docs() {
    let documents = documents();
    let readme = &documents[0].1;
    let lines = readme.lines().count();
    assert!(lines <= README_MAX_LINES, "README.md has {lines} lines; move reference prose to docs/ (at most {README_MAX_LINES})");
    for (name, _) in &documents[1..] {
        assert!(readme.contains(&format!("]({name})")), "README.md does not link {name}");
    }
    for link in readme.split("](docs/").skip(1) {
        let target = link.split(')').next().unwrap_or_default();
        assert!(repository().join("docs").join(target).is_file(), "README.md links docs/{target}, which does not exist");
    }
}

#[test]
fn the_readme_commands_that_need_no_daemon_run_as_written() {
    let commands = readme_commands();
    assert!(commands.len() >= 8, "README.md and docs/ lost their examples: {commands:?}");
    let binary = llamay_binary();
    let path = format!("{}:{}", binary.parent().expect("bin dir").display(), std::env::var("PATH").unwrap_or_default());
    let llamay = llamay_command();
    for line in &commands {
        if line.contains("| jq") && !has("jq") {
            eprintln!("skipped (no jq here): {line}");
            continue;
        }
        let mut command = Command::new("sh");
        command.args(["-c", line]).current_dir(env!("CARGO_MANIFEST_DIR")).env("PATH", &path);
        for (name, value) in llamay.get_envs() {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        let output = command.output().expect("sh runs");
        let expected = if line.contains("# exit 1") { 1 } else { 0 };
        assert_eq!(
            output.status.code(),
            Some(expected),
            "{line}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
