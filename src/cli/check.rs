//! `llamay grammar check` and `llamay schema check`: the constraint engine without a model,
//! for people writing grammars and schemas. Exit 0 when everything loads (and the input
//! matches), 1 otherwise.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use llamay::grammar::schema::FormatMode;
use llamay::grammar::{self, check_input, CheckOutcome, CompiledGrammar, Limits};

use super::CliError;

#[derive(Debug, Subcommand)]
pub enum GrammarCommand {
    /// Load FILE, print any refusal; with INPUT (a file, or - for stdin) check it matches.
    Check { file: PathBuf, input: Option<PathBuf> },
}

#[derive(Debug, Subcommand)]
pub enum SchemaCommand {
    /// Print what FILE's keywords are (enforced, ignored, refused); with DOC check the document.
    Check {
        file: PathBuf,
        document: Option<PathBuf>,
        /// `enforce` checks `format` (date-time, email, uuid...) as a request with
        /// `llamay_formats: "enforce"` is constrained; `ignore` (the default) does not.
        #[arg(long = "formats", default_value = "ignore", value_parser = super::constraint::parse_format_mode)]
        formats: FormatMode,
    },
}

fn read_bytes(path: &PathBuf) -> Result<Vec<u8>, CliError> {
    let io_error = |source| CliError::Io { path: path.display().to_string(), source };
    if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).map_err(io_error)?;
        return Ok(bytes);
    }
    std::fs::read(path).map_err(io_error)
}

/// Prints the verdict on `input`; true when it matches the whole grammar.
fn report_match(compiled: &CompiledGrammar, input: &[u8], what: &str) -> bool {
    match check_input(compiled, input) {
        CheckOutcome::Match => {
            println!("{what} matches ({} bytes)", input.len());
            true
        }
        CheckOutcome::Incomplete { expected } => {
            println!("{what} ends too early: after all {} bytes the grammar still expects {expected}", input.len());
            false
        }
        CheckOutcome::Mismatch { offset, line, column, expected } => {
            println!("{what} does not match at byte {offset} (line {line}, column {column}): expected {expected}");
            false
        }
    }
}

pub fn grammar(command: GrammarCommand) -> Result<ExitCode, CliError> {
    let GrammarCommand::Check { file, input } = command;
    let source = read_bytes(&file)?;
    let compiled = grammar::compile_gbnf(&source, &Limits::default())
        .map_err(|e| CliError::Constraint(format!("{}: {e}", file.display())))?;
    println!("{}: grammar loads ({} rules)", file.display(), compiled.rule_names().len());
    let Some(input) = input else {
        return Ok(ExitCode::SUCCESS);
    };
    let text = read_bytes(&input)?;
    let matched = report_match(&compiled, &text, &input.display().to_string());
    Ok(if matched { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

pub fn schema(command: SchemaCommand) -> Result<ExitCode, CliError> {
    let SchemaCommand::Check { file, document, formats } = command;
    let value: serde_json::Value = serde_json::from_slice(&read_bytes(&file)?)
        .map_err(|e| CliError::Constraint(format!("{}: not JSON: {e}", file.display())))?;
    let report = grammar::schema::review_schema_with(&value, formats);
    print!("{report}");
    // The report's last line already gives the refusal, from the same compile.
    if report.is_refused() {
        return Ok(ExitCode::FAILURE);
    }
    let ir = match grammar::schema::compile_schema_with(&value, formats) {
        Ok(ir) => ir,
        Err(error) => {
            println!("refused: {error}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let compiled = CompiledGrammar::new(ir, &Limits::default()).map_err(|e| CliError::Constraint(e.to_string()))?;
    println!("{}: schema compiles", file.display());
    let Some(document) = document else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut text = read_bytes(&document)?;
    // Generated documents end at their last value byte (see schema::any_json); a file's
    // trailing newline is not part of the document.
    while text.last().is_some_and(|b| b.is_ascii_whitespace()) {
        text.pop();
    }
    let matched = report_match(&compiled, &text, &document.display().to_string());
    Ok(if matched { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
