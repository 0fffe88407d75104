//! Model names: the one rule for what a model is called and when two spellings are the same
//! model, shared by the store (`import`, `cp`, `rm`, pulls), the supervisor (which keys loaded
//! models by it) and the HTTP API, where a model is a name and never a path.
//!
//! The form is Ollama's, `[HOST/][NAMESPACE/]NAME[:TAG]`, and so is the sameness: the tag
//! defaults to `latest`, case does not matter, and a name from Ollama's registry
//! (`registry.ollama.ai`) in its `library` namespace needs neither. [`ModelName::parse`]
//! normalises once (lower case, default tag, default host and namespace left out), so every
//! spelling of a model (`M`, `m:LATEST`, `registry.ollama.ai/library/m`) is one value, shown as
//! Ollama's `ollama ps` and `ollama list` show it: `m:latest`, `team/m:latest`,
//! `host:5000/team/m:latest`. A model from another registry keeps that host in its name, so it
//! is never the same model as one of the same name from Ollama's.
//!
//! Key types: [`ModelName`], validated so a name can never become a path (no `\`, no `..`, no
//! empty part, no control characters, bounded length), and [`InvalidModelName`], which says
//! which part of the rule an input breaks. Cost: string checks only; nothing here touches the
//! file system (names are database keys; blobs are named by their digest).

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::error::{CoreError, ErrorCode};

/// Tag used when a name has none, as in Ollama.
pub const DEFAULT_TAG: &str = "latest";
/// The registry of names without a host, left out of names as Ollama leaves it out.
pub const DEFAULT_HOST: &str = "registry.ollama.ai";
/// The namespace of names without one, left out of names on the default registry.
pub const DEFAULT_NAMESPACE: &str = "library";
/// Longest name, namespace or tag part, in bytes.
pub const MAX_PART_LEN: usize = 100;
/// Longest host part (a DNS name with a port), in bytes.
pub const MAX_HOST_LEN: usize = 255;
/// The rule in one sentence, for messages that refuse a name.
pub const NAME_RULE: &str = "a model name is NAME or NAME:TAG, optionally after NAMESPACE/ or \
                             HOST/NAMESPACE/ (as in `registry.example:5000/team/model:tag`); \
                             NAME, NAMESPACE and TAG are 1 to 100 ASCII letters, digits, '.', '-' \
                             or '_', starting with a letter or digit";
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

/// A validated, normalised model name such as `smollm2:135m` or `127.0.0.1:5000/library/m:v1`.
/// Equal values are the same model: compare and hash these, never the text a client sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ModelName {
    /// Lower case, as short as Ollama shows it: `NAME` for Ollama's library, `NAMESPACE/NAME`
    /// for another namespace there, `HOST/NAMESPACE/NAME` for any other registry.
    pub name: String,
    /// Lower case; `latest` when the input had none.
    pub tag: String,
}

impl ModelName {
    /// Parses and normalises `[HOST/][NAMESPACE/]NAME[:TAG]`.
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
        if input.contains('\\') {
            return Err(invalid("it contains a path separator ('\\')"));
        }
        if input.contains("..") {
            return Err(invalid("it contains '..'"));
        }
        let (parts, tag) = written_parts(input);
        if parts == [""] {
            return Err(invalid("the name is empty (the form is NAME or NAME:TAG)"));
        }
        if parts.len() > 3 {
            return Err(invalid(
                "it has more than three '/'-separated parts (the form is [HOST/][NAMESPACE/]NAME[:TAG])",
            ));
        }
        if parts.iter().any(|part| part.is_empty()) {
            return Err(invalid(
                "it has an empty part (a leading, trailing or doubled '/')",
            ));
        }
        let (host, namespace, model) = match parts.as_slice() {
            [model] => (None, None, *model),
            [namespace, model] => (None, Some(*namespace), *model),
            [host, namespace, model] => (Some(*host), Some(*namespace), *model),
            _ => return Err(invalid("it has more than three '/'-separated parts")),
        };
        if host.is_none() && parts.iter().any(|part| part.contains(':')) {
            return Err(invalid(
                "it has more than one ':' (the form is NAME or NAME:TAG)",
            ));
        }
        if let Some(host) = host {
            check_host(host).map_err(|reason| invalid(&reason))?;
        }
        if let Some(namespace) = namespace {
            check_part(namespace, "namespace").map_err(|reason| invalid(&reason))?;
        }
        check_part(model, "name").map_err(|reason| invalid(&reason))?;
        // No stored name ever had both (names had no '/' before namespaces): it is a file.
        if namespace.is_some() && model.to_ascii_lowercase().ends_with(".gguf") {
            return Err(invalid("it reads as a path to a .gguf file"));
        }
        check_part(tag, "tag").map_err(|reason| invalid(&reason))?;
        Ok(ModelName::normalised(host, namespace, model, tag))
    }

    /// The name of `model:tag` in `namespace` on `host` (`None`: the default registry), in the
    /// shortest form Ollama shows. The parts must each satisfy the rule, and a host comes with
    /// a namespace.
    fn normalised(host: Option<&str>, namespace: Option<&str>, model: &str, tag: &str) -> Self {
        let lower = str::to_ascii_lowercase;
        let host = host.map(lower).filter(|host| host != DEFAULT_HOST);
        let namespace = namespace.map(lower);
        let namespace = match (&host, namespace) {
            (None, Some(namespace)) if namespace == DEFAULT_NAMESPACE => None,
            (_, namespace) => namespace,
        };
        let mut name = String::new();
        for part in host.iter().chain(namespace.iter()) {
            name.push_str(part);
            name.push('/');
        }
        name.push_str(&lower(model));
        ModelName {
            name,
            tag: lower(tag),
        }
    }

    /// The name a registry model is kept under: `namespace/model:tag` on `host`, where `host`
    /// is `None` for the registry that answers names without one.
    pub fn from_registry(
        host: Option<&str>,
        namespace: &str,
        model: &str,
        tag: &str,
    ) -> Result<Self, InvalidModelName> {
        let text = match host {
            Some(host) => format!("{host}/{namespace}/{model}:{tag}"),
            None => format!("{namespace}/{model}:{tag}"),
        };
        ModelName::parse(&text)
    }

    /// The registry host, `None` for the default registry.
    pub fn host(&self) -> Option<&str> {
        let mut parts = self.name.split('/');
        let first = parts.next();
        (parts.count() == 2).then_some(first).flatten()
    }

    /// The namespace (`library` when the name has none).
    pub fn namespace(&self) -> &str {
        let mut parts = self.name.rsplit('/');
        parts.next();
        parts.next().unwrap_or(DEFAULT_NAMESPACE)
    }

    /// The last part: the model's own name without host or namespace.
    pub fn model(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
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

/// The `/`-separated parts of `[HOST/][NAMESPACE/]NAME[:TAG]` and its tag (`latest` when it
/// has none), as written: nothing checked, case kept. A `:` after the last `/` starts the tag;
/// one before it is the host's port.
pub fn written_parts(input: &str) -> (Vec<&str>, &str) {
    let last_slash = input.rfind('/');
    let (path, tag) = match input.rfind(':') {
        Some(colon) if last_slash.is_none_or(|slash| colon > slash) => {
            (&input[..colon], &input[colon + 1..])
        }
        _ => (input, DEFAULT_TAG),
    };
    (path.split('/').collect(), tag)
}

/// A registry host: a DNS name or IPv4 address with an optional `:PORT`.
fn check_host(host: &str) -> Result<(), String> {
    if host.len() > MAX_HOST_LEN {
        return Err(format!(
            "the host is {} bytes long; the limit is {MAX_HOST_LEN}",
            host.len()
        ));
    }
    if let Some(bad) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':')))
    {
        return Err(format!(
            "the host contains {bad:?}; only ASCII letters, digits, '.', '-', '_' and ':PORT' are allowed"
        ));
    }
    if !host.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err("the host must start with a letter or digit".to_string());
    }
    if let Some((_, port)) = host.split_once(':') {
        if port.parse::<u16>().is_err() {
            return Err(format!("the host's port {port:?} is not a port number"));
        }
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
    fn every_spelling_of_a_model_is_one_name() {
        let canonical = ModelName::parse("m:latest").expect("valid");
        for spelling in [
            "m",
            "M",
            "M:LATEST",
            "m:Latest",
            "library/m",
            "LIBRARY/M:latest",
            "registry.ollama.ai/library/m",
            "Registry.Ollama.AI/library/M:LATEST",
        ] {
            let parsed = ModelName::parse(spelling).expect(spelling);
            assert_eq!(parsed, canonical, "{spelling}");
            assert_eq!(parsed.to_string(), "m:latest", "{spelling}");
        }
        assert_ne!(ModelName::parse("m:v2").expect("valid"), canonical);
    }

    #[test]
    fn hosts_and_namespaces_stay_in_the_name_as_ollama_shows_them() {
        let cases = [
            ("someone/Model:Q4", "someone/model:q4", None, "someone"),
            ("registry.ollama.ai/someone/m", "someone/m:latest", None, "someone"),
            (
                "127.0.0.1:5000/library/SmolLM2:135m",
                "127.0.0.1:5000/library/smollm2:135m",
                Some("127.0.0.1:5000"),
                "library",
            ),
            (
                "hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0",
                "hf.co/bartowski/smollm2-135m-instruct-gguf:q8_0",
                Some("hf.co"),
                "bartowski",
            ),
        ];
        for (input, shown, host, namespace) in cases {
            let name = ModelName::parse(input).expect(input);
            assert_eq!(name.to_string(), shown, "{input}");
            assert_eq!(name.host(), host, "{input}");
            assert_eq!(name.namespace(), namespace, "{input}");
            assert_eq!(ModelName::parse(&name.to_string()).as_ref(), Ok(&name));
        }
        let local = ModelName::parse("smollm2:135m").expect("valid");
        let elsewhere = ModelName::parse("127.0.0.1:5000/library/smollm2:135m").expect("valid");
        assert_ne!(local, elsewhere, "another registry's model is another model");
        assert_eq!((local.host(), local.namespace(), local.model()), (None, "library", "smollm2"));
        assert_eq!(elsewhere.model(), "smollm2");
        assert_eq!(
            ModelName::from_registry(Some("127.0.0.1:5000"), "library", "SmolLM2", "135m"),
            Ok(elsewhere)
        );
        assert_eq!(ModelName::from_registry(None, "library", "smollm2", "135m"), Ok(local));
    }

    #[test]
    fn invalid_names_say_why() {
        assert!(reason_of("").contains("empty"));
        assert!(reason_of("/etc/passwd").contains("empty part"));
        assert!(reason_of("a//b").contains("empty part"));
        assert!(reason_of("a/").contains("empty part"));
        assert!(reason_of("a/b/c/d").contains("more than three"));
        assert!(reason_of("models/tiny.GGUF").contains(".gguf file"));
        assert!(reason_of("a\\b").contains("separator"));
        assert!(reason_of("a..b").contains(".."));
        assert!(reason_of("..").contains(".."));
        assert!(reason_of("a\nb").contains("control"));
        assert!(reason_of("h:1/a\tb/c").contains("control"));
        assert!(reason_of("a\0").contains("control"));
        assert!(reason_of(":tag").contains("name is empty"));
        assert!(reason_of("name:").contains("tag is empty"));
        assert!(reason_of("a:b:c").contains("more than one"));
        assert!(reason_of("ns/a:b:c").contains("more than one"));
        assert!(reason_of("a b").contains("' '"));
        assert!(reason_of("émoji").contains("'é'"));
        assert!(reason_of(".hidden").contains("start with"));
        assert!(reason_of("-flag").contains("start with"));
        assert!(reason_of("~").contains("'~'"));
        assert!(reason_of("~/x").contains("'~'"));
        assert!(reason_of("%2e%2e%2fetc").contains("'%'"));
        assert!(reason_of("h:99999/ns/m").contains("port"));
        assert!(reason_of("h@x/ns/m").contains("host contains"));
        assert!(reason_of(&"a".repeat(MAX_PART_LEN + 1)).contains("limit"));
        assert!(reason_of(&format!("a:{}", "b".repeat(MAX_PART_LEN + 1))).contains("tag is"));
        assert!(reason_of(&format!("{}/ns/m", "h".repeat(MAX_HOST_LEN + 1))).contains("host is"));
    }

    #[test]
    fn the_error_names_the_input_escaped_and_bounded() {
        let message = ModelName::parse("bad\\name")
            .expect_err("invalid")
            .to_string();
        assert!(
            message.contains("bad\\\\name") && message.contains("separator"),
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
