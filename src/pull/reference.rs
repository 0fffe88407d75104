//! What `llamay pull` accepts and where it comes from: a registry name (`NAME[:TAG]`,
//! `NAMESPACE/NAME[:TAG]`, `HOST/NAMESPACE/NAME[:TAG]`, `hf.co/USER/REPO:QUANT`) or a plain
//! `http(s)://.../model.gguf` URL, and the store name the pulled model is registered under.
//!
//! Key types: [`PullSource`], [`RegistryName`], [`RegistrySettings`]. Cost: string checks only.
//!
//! The store name is the model's name as Ollama keeps it (see `core::name`): a name without a
//! host stays `name:tag` (or `namespace/name:tag`), and a model from any other registry keeps
//! that host and namespace, so `127.0.0.1:5000/library/smollm2:135m` is never the local
//! `smollm2:135m` and `hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0` is kept as
//! `hf.co/bartowski/smollm2-135m-instruct-gguf:q8_0`. A host is reached over https unless the
//! operator lists it as insecure ([`InsecureRegistries`]).

use super::policy::InsecureRegistries;
use super::PullError;
use crate::core::name::{written_parts, DEFAULT_NAMESPACE};
use crate::store::{ModelName, DEFAULT_TAG};

/// Ollama's public registry, used for names without a host.
pub const DEFAULT_REGISTRY: &str = "https://registry.ollama.ai";
/// Environment variable naming the registry used for names without a host.
pub use crate::environment::REGISTRY_ENV;

/// Which registry answers names without a host, and which registries plain http may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrySettings {
    /// Base URL with scheme, no trailing slash (`https://registry.ollama.ai`).
    pub default_registry: String,
    /// The registries the operator lets pulls reach over `http://`. The default registry's own
    /// scheme is always honoured: whoever configured it chose it.
    pub insecure: InsecureRegistries,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        RegistrySettings {
            default_registry: DEFAULT_REGISTRY.to_string(),
            insecure: InsecureRegistries::none(),
        }
    }
}

impl RegistrySettings {
    /// The default registry from `$LLAMAY_REGISTRY` (a host, or a URL with its scheme), else
    /// Ollama's.
    pub fn from_env() -> RegistrySettings {
        let mut settings = RegistrySettings::default();
        if let Some(value) = crate::environment::environment().registry() {
            settings.default_registry = registry_base(value, false);
        }
        settings
    }

    /// Whether `url` may be fetched over plain http (see [`RegistrySettings::http_allowed`]).
    pub fn allows_http(&self, url: &reqwest::Url) -> bool {
        self.http_allowed().allows_url(url)
    }

    /// Where plain http may go: the operator's list, plus the default registry when the
    /// operator configured it with `http://`.
    pub fn http_allowed(&self) -> InsecureRegistries {
        match reqwest::Url::parse(&self.default_registry) {
            Ok(registry) if registry.scheme() == "http" => {
                let authority = match (registry.host_str(), registry.port_or_known_default()) {
                    (Some(host), Some(port)) => format!("{host}:{port}"),
                    _ => return self.insecure.clone(),
                };
                self.insecure.clone().with(authority)
            }
            _ => self.insecure.clone(),
        }
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

    /// How a person wrote it, for messages and a pulled model's source: `host/ns/name:tag`.
    pub fn display(&self) -> String {
        format!(
            "{}/{}/{}:{}",
            self.host(),
            self.namespace,
            self.repository,
            self.tag
        )
    }

    /// The registry's `host[:port]`.
    pub fn host(&self) -> &str {
        self.base.split("://").nth(1).unwrap_or(&self.base)
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
            let url = reqwest::Url::parse(input)
                .map_err(|e| invalid(&format!("it is not a URL: {e}")))?;
            if url.scheme() == "http" && !settings.allows_http(&url) {
                return Err(PullError::InsecureRefused {
                    host: url.host_str().unwrap_or_default().to_string(),
                });
            }
            return Ok(PullSource::Url(input.to_string()));
        }
        if input.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(invalid("it contains spaces or control characters"));
        }
        // The one name rule first; the parts below keep their case for the registry's URLs.
        ModelName::parse(input).map_err(|e| invalid(&e.reason))?;
        let (parts, tag) = written_parts(input);
        let (host, namespace, repository) = match parts.as_slice() {
            [repository] => (None, DEFAULT_NAMESPACE, *repository),
            [namespace, repository] => (None, *namespace, *repository),
            [host, namespace, repository] => (Some(*host), *namespace, *repository),
            _ => return Err(invalid("the form is [HOST/][NAMESPACE/]NAME[:TAG]")),
        };
        let base = match host {
            Some(host) => registry_base(host, settings.insecure.allows(host)),
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

    /// The store name a pull of this source registers: the registry name with its host kept
    /// (left out only for the registry that answers names without one), or a URL's file stem.
    pub fn local_name(&self) -> Result<ModelName, PullError> {
        let parsed = match self {
            PullSource::Registry(name) => ModelName::from_registry(
                (!name.default_host).then(|| name.host()),
                &name.namespace,
                &name.repository,
                &name.tag,
            ),
            PullSource::Url(url) => {
                let file = url.split(['?', '#']).next().unwrap_or(url);
                let file = file.rsplit('/').next().unwrap_or(file);
                let stem = file.strip_suffix(".gguf").unwrap_or(file);
                ModelName::parse(&format!("{stem}:{DEFAULT_TAG}"))
            }
        };
        parsed.map_err(|e| PullError::InvalidName {
            name: self.display(),
            reason: e.reason,
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
        assert_eq!(
            local.to_string(),
            "hf.co/bartowski/smollm2-135m-instruct-gguf:q8_0"
        );
        let name = registry("127.0.0.1:5000/library/tiny", &settings());
        assert_eq!(
            (name.base.as_str(), name.tag.as_str()),
            ("https://127.0.0.1:5000", "latest")
        );
        let insecure = RegistrySettings {
            insecure: InsecureRegistries::listed(["127.0.0.1:5000"]),
            ..settings()
        };
        let name = registry("127.0.0.1:5000/library/tiny:v1", &insecure);
        assert_eq!(
            name.manifest_url(),
            "http://127.0.0.1:5000/v2/library/tiny/manifests/v1"
        );
        // Only the hosts the operator listed are spoken to over http.
        let other = registry("127.0.0.1:5001/library/tiny:v1", &insecure);
        assert!(other.base.starts_with("https://"), "{}", other.base);
    }

    #[test]
    fn another_registry_keeps_its_host_in_the_name() {
        let local = PullSource::parse("smollm2:135m", &settings()).unwrap();
        let elsewhere =
            PullSource::parse("127.0.0.1:5000/library/smollm2:135m", &settings()).unwrap();
        let ollama =
            PullSource::parse("registry.ollama.ai/library/SmolLM2:135M", &settings()).unwrap();
        assert_eq!(local.local_name().unwrap().to_string(), "smollm2:135m");
        assert_eq!(
            elsewhere.local_name().unwrap().to_string(),
            "127.0.0.1:5000/library/smollm2:135m"
        );
        assert_eq!(ollama.local_name().unwrap().to_string(), "smollm2:135m");
        let namespaced = PullSource::parse("someone/Model:Q4", &settings()).unwrap();
        assert_eq!(
            namespaced.local_name().unwrap().to_string(),
            "someone/model:q4"
        );
        // The registry sees the name as it was written.
        let PullSource::Registry(ollama) = ollama else {
            panic!("a registry name")
        };
        assert_eq!(
            ollama.manifest_url(),
            "https://registry.ollama.ai/v2/library/SmolLM2/manifests/135M"
        );
    }

    #[test]
    fn configured_registry_keeps_its_scheme() {
        let local = RegistrySettings {
            default_registry: registry_base("http://127.0.0.1:9/", false),
            insecure: InsecureRegistries::none(),
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
        // Its http is the operator's choice, for its URLs and its redirects alike.
        let url = |text: &str| reqwest::Url::parse(text).unwrap();
        assert!(local.allows_http(&url("http://127.0.0.1:9/v2/x")));
        assert!(!local.allows_http(&url("http://127.0.0.1:10/v2/x")));
        assert!(local.http_allowed().allows("127.0.0.1:9"));
        assert!(!settings().allows_http(&url("http://registry.ollama.ai/v2/x")));
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
        assert!(matches!(refused, PullError::InsecureRefused { .. }), "{refused}");
        assert!(refused.to_string().contains("insecure_registries"), "{refused}");
        let allowed = RegistrySettings {
            insecure: InsecureRegistries::listed(["example.test"]),
            ..settings()
        };
        assert!(PullSource::parse("http://example.test/x.gguf", &allowed).is_ok());
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
