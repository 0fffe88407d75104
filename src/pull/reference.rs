//! What `llamay pull` accepts and where it comes from: a registry name (`NAME[:TAG]`,
//! `NAMESPACE/NAME[:TAG]`, `HOST/NAMESPACE/NAME[:TAG]`, `hf.co/USER/REPO:QUANT`) or a plain
//! `http(s)://.../model.gguf` URL, and the store name the pulled model is registered under.
//!
//! Key types: [`PullSource`], [`RegistryName`], [`RegistrySettings`]. Cost: string checks only.
//!
//! Store names cannot contain `/` (they must never read as a path), so a model from the default
//! registry's `library` namespace keeps its plain `name:tag`, and any other is registered under
//! its last path part: `hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0` becomes
//! `smollm2-135m-instruct-gguf:q8_0`.

use super::PullError;
use crate::store::{ModelName, DEFAULT_TAG};

/// Ollama's public registry, used for names without a host.
pub const DEFAULT_REGISTRY: &str = "https://registry.ollama.ai";
/// The namespace of names without one.
pub const DEFAULT_NAMESPACE: &str = "library";
/// Environment variable naming the registry used for names without a host.
pub const REGISTRY_ENV: &str = "LLAMAY_REGISTRY";

/// Which registry answers names without a host, and whether plain http is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrySettings {
    /// Base URL with scheme, no trailing slash (`https://registry.ollama.ai`).
    pub default_registry: String,
    /// Allows `http://` for names with an explicit host (the default registry's own scheme is
    /// always honoured: whoever configured it chose it).
    pub insecure: bool,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        RegistrySettings {
            default_registry: DEFAULT_REGISTRY.to_string(),
            insecure: false,
        }
    }
}

impl RegistrySettings {
    /// The default registry from `$LLAMAY_REGISTRY` (a host, or a URL with its scheme), else
    /// Ollama's.
    pub fn from_env() -> RegistrySettings {
        let mut settings = RegistrySettings::default();
        if let Ok(value) = std::env::var(REGISTRY_ENV) {
            if !value.trim().is_empty() {
                settings.default_registry = registry_base(value.trim(), false);
            }
        }
        settings
    }
}

/// `host` as a base URL: kept as is when it has a scheme, else https (http when `insecure`).
fn registry_base(host: &str, insecure: bool) -> String {
    let trimmed = host.trim_end_matches('/');
    if trimmed.starts_with("http://") || trimmed.starts_with("https://") {
        trimmed.to_string()
    } else if insecure {
        format!("http://{trimmed}")
    } else {
        format!("https://{trimmed}")
    }
}

/// A model in a registry that speaks Ollama's protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryName {
    /// Base URL of the registry (`https://registry.ollama.ai`).
    pub base: String,
    pub namespace: String,
    pub repository: String,
    pub tag: String,
    /// Whether the name had no host (so it came from the default registry).
    pub default_host: bool,
}

impl RegistryName {
    pub fn manifest_url(&self) -> String {
        format!(
            "{}/v2/{}/{}/manifests/{}",
            self.base, self.namespace, self.repository, self.tag
        )
    }

    pub fn blob_url(&self, digest: &str) -> String {
        format!(
            "{}/v2/{}/{}/blobs/{digest}",
            self.base, self.namespace, self.repository
        )
    }

    /// How a person wrote it, for messages: `library/smollm2:latest` on the default registry,
    /// `host/ns/name:tag` elsewhere.
    pub fn display(&self) -> String {
        let host = self.base.split("://").nth(1).unwrap_or(&self.base);
        format!("{host}/{}/{}:{}", self.namespace, self.repository, self.tag)
    }
}

/// Where a pull gets its model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullSource {
    Registry(RegistryName),
    /// A GGUF file at a URL.
    Url(String),
}

impl PullSource {
    /// Parses what `llamay pull` or `/api/pull` was given.
    pub fn parse(input: &str, settings: &RegistrySettings) -> Result<PullSource, PullError> {
        let input = input.trim();
        let invalid = |reason: &str| PullError::InvalidName {
            name: input.escape_debug().to_string(),
            reason: reason.to_string(),
        };
        if input.is_empty() {
            return Err(invalid("the name is empty"));
        }
        if input.starts_with("http://") || input.starts_with("https://") {
            if input.starts_with("http://") && !settings.insecure {
                return Err(invalid(
                    "plain http needs `insecure` (the `-insecure` flag)",
                ));
            }
            return Ok(PullSource::Url(input.to_string()));
        }
        if input.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(invalid("it contains spaces or control characters"));
        }
        let (path, tag) = match input.rsplit_once(':') {
            // A ':' before the last '/' is a host's port, not a tag.
            Some((path, tag)) if !tag.contains('/') => (path, tag),
            _ => (input, DEFAULT_TAG),
        };
        let parts: Vec<&str> = path.split('/').collect();
        let (host, namespace, repository) = match parts.as_slice() {
            [repository] => (None, DEFAULT_NAMESPACE, *repository),
            [namespace, repository] => (None, *namespace, *repository),
            [host, namespace, repository] => (Some(*host), *namespace, *repository),
            _ => return Err(invalid("the form is [HOST/][NAMESPACE/]NAME[:TAG]")),
        };
        for (part, what) in [(namespace, "namespace"), (repository, "name"), (tag, "tag")] {
            if part.is_empty() {
                return Err(invalid(&format!("the {what} is empty")));
            }
            if part == "." || part == ".." || part.contains("..") {
                return Err(invalid(&format!("the {what} contains '..'")));
            }
            if !part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            {
                return Err(invalid(&format!(
                    "the {what} '{part}' may hold only letters, digits, '.', '-' and '_'"
                )));
            }
        }
        let base = match host {
            Some(host) if host.is_empty() => return Err(invalid("the host is empty")),
            Some(host) => registry_base(host, settings.insecure),
            None => settings.default_registry.clone(),
        };
        Ok(PullSource::Registry(RegistryName {
            base,
            namespace: namespace.to_string(),
            repository: repository.to_string(),
            tag: tag.to_string(),
            default_host: host.is_none(),
        }))
    }

    /// The store name a pull of this source registers.
    pub fn local_name(&self) -> Result<ModelName, PullError> {
        let text = match self {
            PullSource::Registry(name) => format!("{}:{}", name.repository, name.tag),
            PullSource::Url(url) => {
                let file = url.split(['?', '#']).next().unwrap_or(url);
                let file = file.rsplit('/').next().unwrap_or(file);
                let stem = file.strip_suffix(".gguf").unwrap_or(file);
                format!("{stem}:{DEFAULT_TAG}")
            }
        };
        ModelName::parse(&text).map_err(|e| PullError::InvalidName {
            name: text.clone(),
            reason: e.to_string(),
        })
    }

    /// How a person wrote it, for messages.
    pub fn display(&self) -> String {
        match self {
            PullSource::Registry(name) => name.display(),
            PullSource::Url(url) => url.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RegistrySettings {
        RegistrySettings::default()
    }

    fn registry(input: &str, settings: &RegistrySettings) -> RegistryName {
        match PullSource::parse(input, settings) {
            Ok(PullSource::Registry(name)) => name,
            other => panic!("{input}: {other:?}"),
        }
    }

    #[test]
    fn bare_names_go_to_the_default_registry_library() {
        let name = registry("smollm2", &settings());
        assert_eq!(
            name.manifest_url(),
            "https://registry.ollama.ai/v2/library/smollm2/manifests/latest"
        );
        let name = registry("smollm2:135m", &settings());
        assert_eq!(name.tag, "135m");
        assert!(name.default_host);
        let name = registry("someone/model:q4", &settings());
        assert_eq!(
            (name.namespace.as_str(), name.repository.as_str()),
            ("someone", "model")
        );
    }

    #[test]
    fn hosts_ports_and_hugging_face() {
        let name = registry(
            "hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0",
            &settings(),
        );
        assert_eq!(
            name.blob_url("sha256:ab"),
            "https://hf.co/v2/bartowski/SmolLM2-135M-Instruct-GGUF/blobs/sha256:ab"
        );
        let local = PullSource::Registry(name).local_name().unwrap();
        assert_eq!(local.to_string(), "smollm2-135m-instruct-gguf:q8_0");
        let name = registry("127.0.0.1:5000/library/tiny", &settings());
        assert_eq!(
            (name.base.as_str(), name.tag.as_str()),
            ("https://127.0.0.1:5000", "latest")
        );
        let insecure = RegistrySettings {
            insecure: true,
            ..settings()
        };
        let name = registry("127.0.0.1:5000/library/tiny:v1", &insecure);
        assert_eq!(
            name.manifest_url(),
            "http://127.0.0.1:5000/v2/library/tiny/manifests/v1"
        );
    }

    #[test]
    fn configured_registry_keeps_its_scheme() {
        let local = RegistrySettings {
            default_registry: registry_base("http://127.0.0.1:9/", false),
            insecure: false,
        };
        let name = registry("smollm2-local:latest", &local);
        assert_eq!(
            name.manifest_url(),
            "http://127.0.0.1:9/v2/library/smollm2-local/manifests/latest"
        );
        assert_eq!(
            PullSource::Registry(name).local_name().unwrap().to_string(),
            "smollm2-local:latest"
        );
    }

    #[test]
    fn urls_and_their_names() {
        let source = PullSource::parse(
            "https://example.test/m/SmolLM2-135M.Q8_0.gguf?download=1",
            &settings(),
        )
        .unwrap();
        assert_eq!(
            source.local_name().unwrap().to_string(),
            "smollm2-135m.q8_0:latest"
        );
        let refused = PullSource::parse("http://example.test/x.gguf", &settings()).unwrap_err();
        assert!(refused.to_string().contains("insecure"), "{refused}");
    }

    #[test]
    fn bad_names_say_what_is_wrong() {
        for (input, needle) in [
            ("", "empty"),
            ("a/b/c/d", "form"),
            ("library/../x", ".."),
            ("bad name", "spaces"),
            ("libr@ry/x", "namespace"),
            ("x:", "tag"),
        ] {
            let error = PullSource::parse(input, &settings())
                .unwrap_err()
                .to_string();
            assert!(error.contains(needle), "{input:?}: {error}");
        }
    }
}
