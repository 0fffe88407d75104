//! The README's commands run as written: every `llamay` line of its code blocks that needs no
//! daemon, no network and no change to the store (`run` with a prompt, `grammar`, `schema` and
//! `lexicon check`, `list`, `show`) is run from the repository root through `sh`, with the
//! llamay binary under test first on PATH. A line whose comment says `exit 1` must exit 1.

use std::path::Path;
use std::process::Command;

use llamay_test_support::process::{llamay_binary, llamay_command};

/// Subcommands that need no daemon and change nothing.
const RUNNABLE: &[&str] = &["run", "grammar", "schema", "lexicon", "list", "show"];

fn readme_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).expect("README.md");
    readme
        .lines()
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
fn the_readme_commands_that_need_no_daemon_run_as_written() {
    let commands = readme_commands();
    assert!(commands.len() >= 8, "the README lost its examples: {commands:?}");
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
