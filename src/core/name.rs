//! Model names (`name:tag`): the one rule for what a model is called, shared by the store
//! (`import`, `cp`, `rm`) and the HTTP API, where a model is a name and never a path.
//!
//! Key types: [`ModelName`], validated so a name can never become a path (no separators, no
//! `..`, no control characters, bounded length), and [`InvalidModelName`], which says which part
//! of the rule an input breaks. Cost: string checks only; nothing here touches the file system.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::error::{CoreError, ErrorCode};

/// Tag used when a name has none, as in Ollama.
pub const DEFAULT_TAG: &str = "latest";
/// Longest name part and longest tag part, in bytes.
pub const MAX_PART_LEN: usize = 100;
/// The rule in one sentence, for messages that refuse a name.
pub const NAME_RULE: &str = "a model name is NAME or NAME:TAG, each part 1 to 100 ASCII letters, \
                             digits, '.', '-' or '_', starting with a letter or digit";
/// Most characters of a refused input echoed back in its error.
const ECHO_CHARS: usize = 120;

/// A name that breaks the rule, and which part of the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid model name '{name}': {reason}")]
pub struct InvalidModelName {
    /// The input, escaped (a NUL shows as `\0`) and cut to a bounded length.
    pub name: String,
    pub reason: String,
}

/// A validated model name such as `smollm2:135m`. Both parts are lower-cased, so names are
/// case-insensitive, and both are made only of ASCII letters, digits, `.`, `-` and `_`, starting
/// with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ModelName {
    pub name: String,
    pub tag: String,
}

impl ModelName {
    /// Parses `name` or `name:tag`; the tag defaults to [`DEFAULT_TAG`].
    pub fn parse(input: &str) -> Result<Self, InvalidModelName> {
        let invalid = |reason: &str| InvalidModelName {
            name: echo(input),
            reason: reason.to_string(),
        };
        if input.is_empty() {
            return Err(invalid("the name is empty"));
        }
        if input.chars().any(char::is_control) {
            return Err(invalid("it contains control characters"));
        }
        if input.contains('/') || input.contains('\\') {
            return Err(invalid("it contains a path separator ('/' or '\\')"));
        }
        if input.contains("..") {
            return Err(invalid("it contains '..'"));
        }
        let (name, tag) = match input.split_once(':') {
            Some((name, tag)) => (name, tag),
            None => (input, DEFAULT_TAG),
        };
        if tag.contains(':') {
            return Err(invalid(
                "it has more than one ':' (the form is NAME or NAME:TAG)",
            ));
        }
        check_part(name, "name").map_err(|reason| invalid(&reason))?;
        check_part(tag, "tag").map_err(|reason| invalid(&reason))?;
        Ok(ModelName {
            name: name.to_ascii_lowercase(),
            tag: tag.to_ascii_lowercase(),
        })
    }

    /// A valid name made from any text, such as a file's stem: lower-cased, every character
    /// outside the rule replaced by `-`, runs of dots shortened, cut to [`MAX_PART_LEN`]; the
    /// tag is [`DEFAULT_TAG`]. Text with nothing usable gives `model`.
    pub fn from_stem(stem: &str) -> ModelName {
        let mut name: String = stem
            .chars()
            .map(|c| {
                let c = c.to_ascii_lowercase();
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        while name.contains("..") {
            name = name.replace("..", ".");
        }
        let name = name.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
        let name: String = name.chars().take(MAX_PART_LEN).collect();
        ModelName::parse(&name).unwrap_or_else(|_| ModelName {
            name: "model".into(),
            tag: DEFAULT_TAG.into(),
        })
    }

    /// The key this name is stored under: `name:tag`.
    pub fn key(&self) -> String {
        self.to_string()
    }
}

fn echo(input: &str) -> String {
    let escaped: String = input.escape_debug().take(ECHO_CHARS).collect();
    if escaped.len() < input.escape_debug().count() {
        format!("{escaped}...")
    } else {
        escaped
    }
}

fn check_part(part: &str, what: &str) -> Result<(), String> {
    if part.is_empty() {
        return Err(format!(
            "the {what} is empty (the form is NAME or NAME:TAG)"
        ));
    }
    if part.len() > MAX_PART_LEN {
        return Err(format!(
            "the {what} is {} bytes long; the limit is {MAX_PART_LEN}",
            part.len()
        ));
    }
    if let Some(bad) = part
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
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

/// Over HTTP a model is a name and nothing else: the refusal names the rule and echoes only
/// what the client sent, never anything about files.
impl From<InvalidModelName> for CoreError {
    fn from(error: InvalidModelName) -> Self {
        CoreError::new(
            ErrorCode::InvalidModelName,
            format!(
                "{error}. A model is named, never given as a file path: {NAME_RULE} \
                 (`llamay list` shows the installed models)"
            ),
        )
        .with_param("model")
    }
}

impl std::str::FromStr for ModelName {
    type Err = InvalidModelName;
    fn from_str(input: &str) -> Result<Self, InvalidModelName> {
        ModelName::parse(input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason_of(input: &str) -> String {
        match ModelName::parse(input) {
            Err(InvalidModelName { reason, .. }) => reason,
            Ok(name) => panic!("{input:?} should be invalid, got {name}"),
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
            ModelName::parse("Qwen2.5-Coder_x:Q4_K_M")
                .expect("valid")
                .to_string(),
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
        assert!(reason_of("~").contains("'~'"));
        assert!(reason_of("%2e%2e%2fetc").contains("'%'"));
        assert!(reason_of(&"a".repeat(MAX_PART_LEN + 1)).contains("limit"));
        assert!(reason_of(&format!("a:{}", "b".repeat(MAX_PART_LEN + 1))).contains("tag is"));
    }

    #[test]
    fn the_error_names_the_input_escaped_and_bounded() {
        let message = ModelName::parse("bad/name")
            .expect_err("invalid")
            .to_string();
        assert!(
            message.contains("bad/name") && message.contains("separator"),
            "{message}"
        );
        let error = ModelName::parse("a\0b").expect_err("invalid");
        assert_eq!(error.name, "a\\0b");
        let error = ModelName::parse(&"x/".repeat(1000)).expect_err("invalid");
        assert!(error.name.len() <= ECHO_CHARS + 3, "{}", error.name.len());
        assert!(error.name.ends_with("..."));
    }

    #[test]
    fn stems_become_valid_names() {
        let cases = [
            (
                "SmolLM2-135M-Instruct-Q8_0",
                "smollm2-135m-instruct-q8_0:latest",
            ),
            ("my model (v2)", "my-model--v2-:latest"),
            ("..hidden..x", "hidden.x:latest"),
            ("___", "model:latest"),
            ("", "model:latest"),
            ("ünïcode", "n-code:latest"),
        ];
        for (stem, expected) in cases {
            assert_eq!(ModelName::from_stem(stem).to_string(), expected, "{stem:?}");
        }
        let long = ModelName::from_stem(&"a".repeat(300));
        assert_eq!(long.name.len(), MAX_PART_LEN);
    }
}
