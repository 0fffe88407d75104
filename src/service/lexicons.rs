//! Lexicons on the wire and in the daemon: `llamay_lexicon` (a request's list with its optional
//! `match` mode, or the name of a list the daemon loaded) read into a [`LexiconField`], and the
//! daemon's `-lexicon` files ([`DaemonLexicons`], under `-lexicon-match`), applied to every
//! request that brings no lexicon of its own. The rules a lexicon enforces are the grammar
//! crate's (`crate::grammar::lexicon`).
//!
//! Key items: [`parse_lexicon`], [`DaemonLexicons`], [`ChosenLexicon`]. Costs: a request's list
//! is compiled on a blocking thread (linear in its bytes, a few ms for 10,000 words); a daemon
//! list is compiled once at start and its masks are cached across requests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::error::{CoreError, ErrorCode};
use crate::grammar::{Lexicon, LexiconKind, LexiconLimits, MatchMode};

/// The request field that carries a lexicon.
pub const LEXICON_PARAM: &str = "llamay_lexicon";

/// What `llamay_lexicon` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LexiconField {
    /// `{"allow": [...]}` or `{"deny": [...]}`, with `"match"` when it names a mode.
    List { kind: LexiconKind, mode: Option<MatchMode>, entries: Vec<String> },
    /// The name of a lexicon the daemon loaded (its file's name without the extension).
    Named(String),
}

/// Reads `llamay_lexicon`: a list object (with an optional `match`) or a name; anything else is
/// a 400 naming the field.
pub fn parse_lexicon(value: Option<Value>) -> Result<Option<LexiconField>, CoreError> {
    let refuse = |what: String| {
        CoreError::new(
            ErrorCode::LexiconRefused,
            format!(
                "{LEXICON_PARAM} {what}; send {{\"allow\": [words...]}}, {{\"deny\": [words...], \"match\": \"prefix\"}} \
                 (match: {}; optional) or the name of a lexicon the daemon loaded",
                MatchMode::NAMES
            ),
        )
        .with_param(LEXICON_PARAM)
    };
    let mut object = match value {
        None => return Ok(None),
        Some(Value::String(name)) => return Ok(Some(LexiconField::Named(name))),
        Some(Value::Object(object)) => object,
        Some(other) => return Err(refuse(format!("is {}", json_kind(&other)))),
    };
    let mode = match object.remove("match") {
        None => None,
        Some(Value::String(name)) => Some(name.parse::<MatchMode>().map_err(|e| refuse(format!("match: {e}")))?),
        Some(other) => return Err(refuse(format!("match is {}, not a string", json_kind(&other)))),
    };
    let mut keys = object.into_iter();
    let (Some((key, list)), None) = (keys.next(), keys.next()) else {
        return Err(refuse("must have exactly one key besides match: allow or deny".into()));
    };
    let kind = match key.as_str() {
        "allow" => LexiconKind::Allow,
        "deny" => LexiconKind::Deny,
        other => return Err(refuse(format!("has the key {other:?}"))),
    };
    let Value::Array(items) = list else {
        return Err(refuse(format!("{key} is {}, not a list of strings", json_kind(&list))));
    };
    let entries = items
        .into_iter()
        .enumerate()
        .map(|(index, item)| match item {
            Value::String(text) => Ok(text),
            other => Err(refuse(format!("{key}[{index}] is {}, not a string", json_kind(&other)))),
        })
        .collect::<Result<Vec<String>, CoreError>>()?;
    Ok(Some(LexiconField::List { kind, mode, entries }))
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The lexicon a request runs under.
#[derive(Debug, Clone)]
pub struct ChosenLexicon {
    pub lexicon: Arc<Lexicon>,
    /// Where it came from, for errors and for the compiled-grammar cache: a daemon lexicon
    /// lives as long as the daemon, so grammars compiled under it are kept by its name; a
    /// request's own list is not (`None`).
    pub daemon_name: Option<String>,
}

/// The lexicons `serve -lexicon` loaded: each file by name, and all of them together as the
/// one applied to requests that bring none.
#[derive(Debug, Default)]
pub struct DaemonLexicons {
    named: BTreeMap<String, Arc<Lexicon>>,
    default: Option<Arc<Lexicon>>,
}

/// The name the default (all files together) is known by in the compiled-grammar cache.
const DEFAULT_NAME: &str = "\u{0}default";

impl DaemonLexicons {
    /// Reads and compiles every file, its entries matched as `mode` says where the file sets no
    /// `#!match` (`None`: the kind's default); a file that is unreadable, malformed or over a
    /// budget stops the daemon at start with a message naming the file. Files must declare
    /// their kind (`#!allow` or `#!deny`) and be all of one kind, since they apply together.
    pub fn load(paths: &[PathBuf], mode: Option<MatchMode>) -> Result<Self, String> {
        let limits = LexiconLimits::default();
        let mut texts = Vec::with_capacity(paths.len());
        let mut named = BTreeMap::new();
        for path in paths {
            let text = std::fs::read_to_string(path).map_err(|e| format!("lexicon file {}: {e}", path.display()))?;
            let lexicon =
                Lexicon::parse(&text, None, mode, &limits).map_err(|e| format!("lexicon file {}: {e}", path.display()))?;
            let name = lexicon_name(path);
            if named.insert(name.clone(), Arc::new(lexicon)).is_some() {
                return Err(format!("two lexicon files are named {name:?}: a lexicon is known by its file's name, so rename one"));
            }
            texts.push(text);
        }
        let default = match named.values().next() {
            None => None,
            Some(only) if named.len() == 1 => Some(Arc::clone(only)),
            Some(_) => {
                let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
                Some(Arc::new(Lexicon::parse_all(&texts, None, mode, &limits).map_err(|e| format!("lexicon files: {e}"))?))
            }
        };
        Ok(DaemonLexicons { named, default })
    }

    /// Lists loaded (the banner's `lexicon=N`).
    pub fn count(&self) -> usize {
        self.named.len()
    }

    /// The lexicon for a request: its own list (compiled off the HTTP worker), a daemon list it
    /// names, or else the daemon's default.
    pub async fn choose(&self, field: Option<LexiconField>) -> Result<Option<ChosenLexicon>, CoreError> {
        match field {
            None => Ok(self.default.as_ref().map(|lexicon| ChosenLexicon {
                lexicon: Arc::clone(lexicon),
                daemon_name: Some(DEFAULT_NAME.to_string()),
            })),
            Some(LexiconField::Named(name)) => match self.named.get(&name) {
                Some(lexicon) => Ok(Some(ChosenLexicon { lexicon: Arc::clone(lexicon), daemon_name: Some(name) })),
                None => {
                    let loaded: Vec<&str> = self.named.keys().map(String::as_str).collect();
                    Err(CoreError::new(
                        ErrorCode::LexiconRefused,
                        format!(
                            "{LEXICON_PARAM} names {name:?}, which the daemon did not load; loaded: {}",
                            if loaded.is_empty() { "none (serve -lexicon FILE loads one)".to_string() } else { loaded.join(", ") }
                        ),
                    )
                    .with_param(LEXICON_PARAM))
                }
            },
            Some(LexiconField::List { kind, mode, entries }) => {
                let built = tokio::task::spawn_blocking(move || Lexicon::new(kind, mode, &entries, &LexiconLimits::default()))
                    .await
                    .map_err(|e| CoreError::internal(format!("compiling the lexicon stopped: {e}")))?;
                let lexicon = built.map_err(|e| {
                    CoreError::new(ErrorCode::LexiconRefused, format!("{LEXICON_PARAM}: {e}")).with_param(LEXICON_PARAM)
                })?;
                Ok(Some(ChosenLexicon { lexicon: Arc::new(lexicon), daemon_name: None }))
            }
        }
    }
}

/// A lexicon file's name: the file's name without its extension.
fn lexicon_name(path: &Path) -> String {
    path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_field_takes_a_list_or_a_name_and_refuses_the_rest_naming_itself() {
        assert_eq!(
            parse_lexicon(Some(json!({"deny": ["bad", "worse"]}))).unwrap(),
            Some(LexiconField::List { kind: LexiconKind::Deny, mode: None, entries: vec!["bad".into(), "worse".into()] })
        );
        assert_eq!(
            parse_lexicon(Some(json!({"match": "word", "deny": ["bad"]}))).unwrap(),
            Some(LexiconField::List { kind: LexiconKind::Deny, mode: Some(MatchMode::Word), entries: vec!["bad".into()] })
        );
        assert_eq!(parse_lexicon(Some(json!("brands"))).unwrap(), Some(LexiconField::Named("brands".into())));
        assert_eq!(parse_lexicon(None).unwrap(), None);
        for bad in [json!(3), json!({}), json!({"allow": ["a"], "deny": ["b"]}), json!({"ban": ["a"]}), json!({"deny": "a"}), json!({"deny": [1]}), json!({"deny": ["a"], "match": "partial"}), json!({"deny": ["a"], "match": 1}), json!({"match": "word"})] {
            let error = parse_lexicon(Some(bad.clone())).unwrap_err();
            assert_eq!((error.code, error.param.as_deref()), (ErrorCode::LexiconRefused, Some(LEXICON_PARAM)), "{bad}");
        }
    }
}
