//! `llamay lexicon check FILE TEXT`: whether a text passes a lexicon file and, when not, where
//! it fails, on which entry and under which match mode, with the same automaton the sampler
//! runs. Exit 0 when the text passes, 1 otherwise.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use llamay::grammar::{check_text, LexiconCheck, LexiconKind, MatchMode, Target};

use super::constraint::{load_lexicon, parse_lexicon_match};
use super::CliError;

#[derive(Debug, Subcommand)]
pub enum LexiconCommand {
    /// Load FILE (one entry per line, `#!allow` or `#!deny` first) and check TEXT (- reads
    /// stdin) against it: where it fails and why.
    Check {
        file: PathBuf,
        #[arg(allow_hyphen_values = true)]
        text: String,
        /// Read TEXT as JSON output (escapes decoded), as under a schema.
        #[arg(long)]
        json: bool,
        /// How the entries match where the file sets no `#!match`: word, prefix (a deny
        /// list's default) or substring, as `serve -lexicon-match` says.
        #[arg(long = "match", value_parser = parse_lexicon_match)]
        mode: Option<MatchMode>,
    },
}

pub fn lexicon(command: LexiconCommand) -> Result<ExitCode, CliError> {
    let LexiconCommand::Check { file, text, json, mode } = command;
    let lexicon = load_lexicon(&file, None, mode)?;
    let [word, prefix, substring] = lexicon.mode_counts();
    let modes = match lexicon.kind() {
        LexiconKind::Deny => format!(" (match: {word} word, {prefix} prefix, {substring} substring)"),
        LexiconKind::Allow => String::new(),
    };
    println!(
        "{}: {} list, {} entries{modes}, {} automaton states",
        file.display(),
        lexicon.kind(),
        lexicon.entry_count(),
        lexicon.state_count()
    );
    let text = if text == "-" {
        let mut read = String::new();
        std::io::stdin().read_to_string(&mut read).map_err(|source| CliError::Io { path: "stdin".into(), source })?;
        read
    } else {
        text
    };
    let target = if json { Target::Json } else { Target::Text };
    match check_text(&lexicon, text.as_bytes(), target) {
        LexiconCheck::Pass => {
            println!("the text passes ({} bytes)", text.len());
            Ok(ExitCode::SUCCESS)
        }
        LexiconCheck::Fail(violation) => {
            println!("the text fails at {violation}");
            Ok(ExitCode::from(1))
        }
    }
}
