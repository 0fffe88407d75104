//! The constraint flags `llamay run`, `eval` and `grammar`/`schema check` share: `-grammar-file`,
//! `-json`, `-schema` with `-formats`, and `-lexicon`/`-deny` with `-lexicon-match`; and a
//! lexicon file loaded with refusals that name it (`llamay lexicon check` loads its file so).
//!
//! Entry points: [`constraint_from_flags`], [`lexicon_from_flags`], [`load_lexicon`]. Cost: a
//! file read and one compile of the constraint, before any model loads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use llamay::core::{Constraint, ConstraintSource};
use llamay::grammar::schema::FormatMode;
use llamay::grammar::{Lexicon, LexiconKind, LexiconLimits, Limits, MatchMode};

use crate::cli::CliError;

/// `-formats`/`--formats`: `enforce` or `ignore`, as the config's `formats`.
pub fn parse_format_mode(text: &str) -> Result<FormatMode, String> {
    llamay::config::parse_formats(text).map_err(|e| e.to_string())
}

/// `-lexicon-match` (and `lexicon check --match`): word, prefix or substring.
pub fn parse_lexicon_match(text: &str) -> Result<MatchMode, String> {
    text.trim().parse()
}

/// A lexicon file, of the kind it declares, else `kind`, its entries matched as `mode` says
/// where it sets no `#!match`; refusals name the file.
pub fn load_lexicon(path: &Path, kind: Option<LexiconKind>, mode: Option<MatchMode>) -> Result<Lexicon, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Io { path: path.display().to_string(), source })?;
    Lexicon::parse(&text, kind, mode, &LexiconLimits::default())
        .map_err(|e| CliError::Constraint(format!("{}: {e}", path.display())))
}

fn read_file(path: &PathBuf) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|source| CliError::Io { path: path.display().to_string(), source })
}

/// The lexicon `-lexicon` or `-deny` names (at most one of them), loaded under `mode`.
pub fn lexicon_from_flags(
    lexicon: Option<&PathBuf>,
    deny: Option<&PathBuf>,
    mode: Option<MatchMode>,
) -> Result<Option<Arc<Lexicon>>, CliError> {
    let loaded = match (lexicon, deny) {
        (Some(_), Some(_)) => return Err(CliError::Usage("use only one of -lexicon and -deny".into())),
        (Some(path), None) => load_lexicon(path, None, mode)?,
        (None, Some(path)) => load_lexicon(path, Some(LexiconKind::Deny), mode)?,
        (None, None) if mode.is_some() => {
            return Err(CliError::Usage("-lexicon-match needs a -lexicon or -deny file".into()))
        }
        (None, None) => return Ok(None),
    };
    Ok(Some(Arc::new(loaded)))
}

/// The constraint the flags ask for, compiled under `lexicon`; at most one of -grammar-file,
/// -json, -schema (whose `format` is enforced when `formats` says so).
pub fn constraint_from_flags(
    grammar_file: Option<&PathBuf>,
    json: bool,
    schema: Option<&PathBuf>,
    formats: FormatMode,
    lexicon: Option<&Arc<Lexicon>>,
) -> Result<Option<Constraint>, CliError> {
    let chosen = [grammar_file.is_some(), json, schema.is_some()].iter().filter(|b| **b).count();
    if chosen > 1 {
        return Err(CliError::Usage("use only one of -grammar-file, -json and -schema".into()));
    }
    let (source, path) = if let Some(path) = grammar_file {
        (ConstraintSource::Gbnf { text: read_file(path)? }, Some(path))
    } else if json {
        (ConstraintSource::AnyJson, None)
    } else if let Some(path) = schema {
        let value: serde_json::Value = serde_json::from_str(&read_file(path)?)
            .map_err(|e| CliError::Constraint(format!("{}: not JSON: {e}", path.display())))?;
        (ConstraintSource::schema(value, formats), Some(path))
    } else {
        return Ok(None);
    };
    Constraint::from_source_under(source, &Limits::default(), lexicon).map(Some).map_err(|e| match path {
        Some(path) => CliError::Constraint(format!("{}: {e}", path.display())),
        None => CliError::Constraint(e.to_string()),
    })
}
