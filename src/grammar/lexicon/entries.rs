//! Lexicon entries as given (a list, or a file of one entry per line) turned into the symbol
//! strings the automaton is built from, within the budgets of [`LexiconLimits`].
//!
//! Cost: linear in the entries' bytes.

use std::collections::HashMap;

use super::decode::{is_word_symbol, Decoder, Mode};
use super::error::{EntryAt, LexiconError};
use super::{LexiconKind, LexiconLimits, MatchMode};

/// One entry as given, with where it came from and the match mode its file set for it (`None`:
/// the list's).
pub(crate) struct RawEntry<'a> {
    pub(crate) text: &'a str,
    pub(crate) at: EntryAt,
    pub(crate) mode: Option<MatchMode>,
}

/// The entries of a lexicon file and the kind it declares, if any: one entry per line,
/// surrounding whitespace trimmed; blank lines and lines starting with `#` skipped; `#!allow`
/// or `#!deny` before the first entry says which kind the file is; `#!match MODE` sets the
/// match mode of the entries after it; `\#` at the start of a line stands for a literal `#`.
pub(crate) fn parse_file(text: &str) -> Result<(Option<LexiconKind>, Vec<RawEntry<'_>>), LexiconError> {
    let mut kind = None;
    let mut mode = None;
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let at = EntryAt::Line(index + 1);
        let line = line.trim();
        if let Some(directive) = line.strip_prefix("#!") {
            let directive = directive.trim();
            if let Some(name) = directive.strip_prefix("match").filter(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace)) {
                let name = name.trim();
                mode = Some(name.parse().map_err(|_| LexiconError::BadMatch { at, text: name.to_string() })?);
                continue;
            }
            kind = match directive {
                "allow" if entries.is_empty() => Some(LexiconKind::Allow),
                "deny" if entries.is_empty() => Some(LexiconKind::Deny),
                _ => return Err(LexiconError::BadDirective { at, text: line.to_string() }),
            };
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let text = if line.starts_with("\\#") { &line[1..] } else { line };
        entries.push(RawEntry { text, at, mode });
    }
    Ok((kind, entries))
}

/// The normalized entries: for a deny list each entry's symbols with every run of spaces one
/// space and none at either end, and its match mode (an entry listed twice keeps the widest);
/// for an allow list every distinct word of every entry. `originals` keeps, per normalized
/// entry, the text it came from (deny lists, for reports).
pub(crate) struct Normalized {
    pub(crate) patterns: Vec<Vec<u8>>,
    pub(crate) modes: Vec<MatchMode>,
    pub(crate) originals: Vec<String>,
    pub(crate) bytes: usize,
}

pub(crate) fn normalize(
    kind: LexiconKind,
    list_mode: MatchMode,
    entries: &[RawEntry<'_>],
    limits: &LexiconLimits,
) -> Result<Normalized, LexiconError> {
    if kind == LexiconKind::Allow && list_mode != MatchMode::Word {
        return Err(LexiconError::AllowMatch { mode: list_mode, at: None });
    }
    if entries.is_empty() {
        return Err(LexiconError::NoEntries);
    }
    if entries.len() > limits.max_entries {
        return Err(LexiconError::TooManyEntries { count: entries.len(), limit: limits.max_entries });
    }
    let bytes: usize = entries.iter().map(|entry| entry.text.len()).sum();
    if bytes > limits.max_bytes {
        return Err(LexiconError::TooManyBytes { bytes, limit: limits.max_bytes });
    }
    let decoder = Decoder::of(Mode::Text);
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut normalized = Normalized { patterns: Vec::new(), modes: Vec::new(), originals: Vec::new(), bytes };
    for entry in entries {
        if entry.text.len() > limits.max_entry_bytes {
            return Err(LexiconError::EntryTooLong {
                at: entry.at,
                bytes: entry.text.len(),
                limit: limits.max_entry_bytes,
            });
        }
        let mode = entry.mode.unwrap_or(list_mode);
        // Text mode never refuses a byte, and an entry is whole characters.
        let symbols: Vec<u8> = decoder
            .symbols_of(entry.text.as_bytes())
            .unwrap_or_default()
            .into_iter()
            .map(|(symbol, _)| symbol)
            .collect();
        match kind {
            LexiconKind::Deny => {
                let mut pattern: Vec<u8> = Vec::with_capacity(symbols.len());
                for symbol in symbols {
                    if symbol == b' ' && pattern.last().is_none_or(|last| *last == b' ') {
                        continue;
                    }
                    pattern.push(symbol);
                }
                if pattern.last() == Some(&b' ') {
                    pattern.pop();
                }
                if pattern.is_empty() {
                    return Err(LexiconError::EmptyEntry { at: entry.at });
                }
                match seen.get(&pattern) {
                    Some(&index) if normalized.modes[index] < mode => {
                        normalized.modes[index] = mode;
                        normalized.originals[index] = entry.text.to_string();
                    }
                    Some(_) => {}
                    None => {
                        seen.insert(pattern.clone(), normalized.patterns.len());
                        normalized.patterns.push(pattern);
                        normalized.modes.push(mode);
                        normalized.originals.push(entry.text.to_string());
                    }
                }
            }
            LexiconKind::Allow => {
                if mode != MatchMode::Word {
                    return Err(LexiconError::AllowMatch { mode, at: Some(entry.at) });
                }
                let words: Vec<&[u8]> =
                    symbols.split(|symbol| !is_word_symbol(*symbol)).filter(|word| !word.is_empty()).collect();
                if words.is_empty() {
                    return Err(LexiconError::NoWord { at: entry.at, entry: entry.text.to_string() });
                }
                for word in words {
                    if !seen.contains_key(word) {
                        seen.insert(word.to_vec(), normalized.patterns.len());
                        normalized.patterns.push(word.to_vec());
                        normalized.modes.push(MatchMode::Word);
                        normalized.originals.push(String::from_utf8_lossy(word).into_owned());
                    }
                }
            }
        }
    }
    Ok(normalized)
}
