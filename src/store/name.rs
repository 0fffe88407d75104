//! Model names (`name:tag`) and model references (a store name or a file path).
//!
//! Key types: [`ModelName`], validated so a name can never become a path (no separators, no
//! `..`, no control characters, bounded length), and [`ModelRef`], which decides whether a
//! command-line model argument names a file or a store entry. Cost: string checks only, plus
//! one `stat` in [`ModelRef::parse`].

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::StoreError;

/// Tag used when a name has none, as in Ollama.
pub const DEFAULT_TAG: &str = "latest";
/// Longest name part and longest tag part, in bytes.
pub const MAX_PART_LEN: usize = 100;

/// A validated store name such as `smollm2:135m`. Both parts are lower-cased, so names are
/// case-insensitive, and both are made only of ASCII letters, digits, `.`, `-` and `_`, starting
/// with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ModelName {
    pub name: String,
    pub tag: String,
}

impl ModelName {
    /// Parses `name` or `name:tag`; the tag defaults to [`DEFAULT_TAG`].
    pub fn parse(input: &str) -> Result<Self, StoreError> {
        let invalid = |reason: &str| StoreError::InvalidName {
            name: input.escape_debug().to_string(),
            reason: reason.to_string(),
        };
        if input.is_empty() {
            return Err(invalid("the name is empty"));
        }
        if input.chars().any(char::is_control) {
            return Err(invalid("it contains control characters"));
        }
        if input.contains('/') || input.contains('\\') {
            return Err(invalid(
                "it contains a path separator ('/' or '\\'); \
                 to use a file, pass its path where a model is expected",
            ));
        }
        if input.contains("..") {
            return Err(invalid("it contains '..'"));
        }
        let (name, tag) = match input.split_once(':') {
            Some((name, tag)) => (name, tag),
            None => (input, DEFAULT_TAG),
        };
        if tag.contains(':') {
            return Err(invalid("it has more than one ':' (the form is NAME or NAME:TAG)"));
        }
        check_part(name, "name").map_err(|reason| invalid(&reason))?;
        check_part(tag, "tag").map_err(|reason| invalid(&reason))?;
        Ok(ModelName { name: name.to_ascii_lowercase(), tag: tag.to_ascii_lowercase() })
    }

    /// The key this name is stored under: `name:tag`.
    pub fn key(&self) -> String {
        self.to_string()
    }
}

fn check_part(part: &str, what: &str) -> Result<(), String> {
    if part.is_empty() {
        return Err(format!("the {what} is empty (the form is NAME or NAME:TAG)"));
    }
    if part.len() > MAX_PART_LEN {
        return Err(format!(
            "the {what} is {} bytes long; the limit is {MAX_PART_LEN}",
            part.len()
        ));
    }
    if let Some(bad) =
        part.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        return Err(format!(
            "the {what} contains {bad:?}; only ASCII letters, digits, '.', '-' and '_' are allowed"
        ));
    }
    if !part.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!("the {what} must start with a letter or digit"));
    }
    Ok(())
}

impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.tag)
    }
}

impl std::str::FromStr for ModelName {
    type Err = StoreError;
    fn from_str(input: &str) -> Result<Self, StoreError> {
        ModelName::parse(input)
    }
}

/// What a `-m MODEL` argument refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// A GGUF file on disk, used in place.
    Path(PathBuf),
    /// A model in the store.
    Name(ModelName),
}

impl ModelRef {
    /// A string that looks like a path (contains a separator, ends in `.gguf`, or starts with
    /// `.` or `~`) is a file, which must exist; anything else is a store name.
    pub fn parse(input: &str) -> Result<Self, StoreError> {
        let looks_like_path = input.contains('/')
            || input.contains('\\')
            || input.to_ascii_lowercase().ends_with(".gguf")
            || input.starts_with('.')
            || input.starts_with('~');
        if !looks_like_path {
            return ModelName::parse(input).map(ModelRef::Name);
        }
        let path = expand_home(input);
        if path.exists() {
            Ok(ModelRef::Path(path))
        } else {
            Err(StoreError::MissingFile { path })
        }
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelRef::Path(path) => write!(f, "{}", path.display()),
            ModelRef::Name(name) => write!(f, "{name}"),
        }
    }
}

/// `~/x` means `$HOME/x` when the shell did not expand it (e.g. inside quotes).
fn expand_home(input: &str) -> PathBuf {
    match (input.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(input),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason_of(input: &str) -> String {
        match ModelName::parse(input) {
            Err(StoreError::InvalidName { reason, .. }) => reason,
            other => panic!("{input:?} should be invalid, got {other:?}"),
        }
    }

    #[test]
    fn valid_names_parse_with_a_default_tag() {
        let name = ModelName::parse("smollm2:135m").expect("valid");
        assert_eq!((name.name.as_str(), name.tag.as_str()), ("smollm2", "135m"));
        assert_eq!(name.to_string(), "smollm2:135m");
        let name = ModelName::parse("gemma3").expect("valid");
        assert_eq!(name.to_string(), "gemma3:latest");
        assert_eq!(
            ModelName::parse("Qwen2.5-Coder_x:Q4_K_M").expect("valid").to_string(),
            "qwen2.5-coder_x:q4_k_m"
        );
        let longest = "a".repeat(MAX_PART_LEN);
        assert!(ModelName::parse(&format!("{longest}:{longest}")).is_ok());
    }

    #[test]
    fn invalid_names_say_why() {
        assert!(reason_of("").contains("empty"));
        assert!(reason_of("a/b").contains("separator"));
        assert!(reason_of("a\\b").contains("separator"));
        assert!(reason_of("a..b").contains(".."));
        assert!(reason_of("..").contains(".."));
        assert!(reason_of("a\nb").contains("control"));
        assert!(reason_of("a\0").contains("control"));
        assert!(reason_of(":tag").contains("name is empty"));
        assert!(reason_of("name:").contains("tag is empty"));
        assert!(reason_of("a:b:c").contains("more than one"));
        assert!(reason_of("a b").contains("' '"));
        assert!(reason_of("émoji").contains("'é'"));
        assert!(reason_of(".hidden").contains("start with"));
        assert!(reason_of("-flag").contains("start with"));
        assert!(reason_of(&"a".repeat(MAX_PART_LEN + 1)).contains("limit"));
        assert!(reason_of(&format!("a:{}", "b".repeat(MAX_PART_LEN + 1))).contains("tag is"));
    }

    #[test]
    fn the_error_message_names_the_input() {
        let message = ModelName::parse("bad/name").expect_err("invalid").to_string();
        assert!(message.contains("bad/name") && message.contains("separator"), "{message}");
    }

    #[test]
    fn model_refs_tell_files_from_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("tiny.gguf");
        std::fs::write(&file, b"GGUF").expect("write");
        let as_path = file.to_str().expect("utf-8 path");
        assert_eq!(ModelRef::parse(as_path).expect("exists"), ModelRef::Path(file.clone()));
        assert_eq!(
            ModelRef::parse("smollm2:135m").expect("name"),
            ModelRef::Name(ModelName::parse("smollm2:135m").expect("valid"))
        );
        let missing = dir.path().join("missing.gguf");
        match ModelRef::parse(missing.to_str().expect("utf-8")) {
            Err(StoreError::MissingFile { path }) => assert_eq!(path, missing),
            other => panic!("expected MissingFile, got {other:?}"),
        }
        assert!(matches!(ModelRef::parse("nothere.gguf"), Err(StoreError::MissingFile { .. })));
        assert!(matches!(ModelRef::parse("bad name"), Err(StoreError::InvalidName { .. })));
    }
}
