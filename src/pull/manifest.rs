//! A registry manifest (Docker/OCI image manifest, schema 2, as Ollama's registry serves it):
//! fetched, checked, and sorted into the layers a model is made of. An answer that is not a
//! manifest at all (not JSON, no `schemaVersion`) means the host is not a registry, and gets the
//! same error as a host that did not answer; refusals of a real manifest name what is wrong in
//! llamay's words, never repeating the registry's text.
//!
//! Key types: [`RegistryManifest`], [`LayerDescriptor`], [`LayerKind`]. Cost: one small GET and
//! a JSON parse.

use serde::Deserialize;

use super::http::{get_with_retries, Http};
use super::reference::RegistryName;
use super::PullError;

pub const MEDIA_MANIFEST_V2: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const MEDIA_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Largest manifest accepted; real ones are well under 2 KiB.
const MAX_MANIFEST_BYTES: usize = 1 << 20;

/// What a layer is for, from its media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    Model,
    Template,
    System,
    Params,
    License,
    /// The image config (`application/vnd.docker.container.image.v1+json`).
    Config,
    /// A layer this version does not use (a projector, an adapter, messages...): downloaded
    /// and verified like the others, then not kept.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LayerDescriptor {
    #[serde(rename = "mediaType")]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
}

impl LayerDescriptor {
    pub fn kind(&self) -> LayerKind {
        match self.media_type.as_str() {
            "application/vnd.ollama.image.model" => LayerKind::Model,
            "application/vnd.ollama.image.template" => LayerKind::Template,
            "application/vnd.ollama.image.system" => LayerKind::System,
            "application/vnd.ollama.image.params" => LayerKind::Params,
            "application/vnd.ollama.image.license" => LayerKind::License,
            media if media.contains("container.image") || media.contains("image.config") => {
                LayerKind::Config
            }
            _ => LayerKind::Other,
        }
    }

    /// The 64 hex digits of the digest.
    pub fn hex(&self) -> &str {
        self.digest.strip_prefix("sha256:").unwrap_or(&self.digest)
    }

    /// `pulling <12 hex>`, as Ollama names a layer in its progress.
    pub fn status(&self) -> String {
        format!("pulling {}", self.hex().get(..12).unwrap_or(self.hex()))
    }
}

/// Why a body is not a usable manifest.
#[derive(Debug)]
pub enum ManifestError {
    /// Not a manifest at all (what, for the log only): whatever answered is not a registry.
    NotAManifest(String),
    /// A manifest llamay does not read.
    Refused(PullError),
}

/// A checked manifest: schema 2, every digest a sha256, exactly one model layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryManifest {
    pub config: Option<LayerDescriptor>,
    pub layers: Vec<LayerDescriptor>,
}

#[derive(Deserialize)]
struct RawManifest {
    #[serde(rename = "schemaVersion")]
    schema_version: Option<u64>,
    #[serde(rename = "mediaType")]
    media_type: Option<String>,
    config: Option<LayerDescriptor>,
    layers: Option<Vec<LayerDescriptor>>,
}

impl RegistryManifest {
    /// Downloads and checks the manifest of `name`.
    pub fn fetch(http: &Http, name: &RegistryName) -> Result<RegistryManifest, PullError> {
        let url = name.manifest_url();
        let accept = format!("{MEDIA_MANIFEST_V2}, {MEDIA_OCI_MANIFEST}");
        let not_found = || PullError::NotFound {
            what: format!("model '{}'", name.display()),
        };
        let unreachable = || PullError::registry_unreachable(name);
        let response = get_with_retries(
            http,
            &url,
            &[("Accept", accept.as_str())],
            not_found,
            unreachable,
        )?;
        let body = http
            .read_limited(response, MAX_MANIFEST_BYTES, &url)
            .map_err(|_| unreachable())?;
        Self::parse(&body, &name.display()).map_err(|error| match error {
            ManifestError::NotAManifest(detail) => {
                tracing::warn!(%url, %detail, "the answer to a manifest request is not a manifest");
                unreachable()
            }
            ManifestError::Refused(error) => error,
        })
    }

    pub fn parse(body: &[u8], what: &str) -> Result<RegistryManifest, ManifestError> {
        let unknown = |reason: String| {
            ManifestError::Refused(PullError::UnknownManifest {
                model: what.to_string(),
                reason,
            })
        };
        let raw: RawManifest = serde_json::from_slice(body)
            .map_err(|e| ManifestError::NotAManifest(format!("not JSON: {e}")))?;
        let Some(version) = raw.schema_version else {
            return Err(ManifestError::NotAManifest("no schemaVersion".to_string()));
        };
        if version != 2 {
            return Err(unknown(format!(
                "schemaVersion is {version}, only 2 is understood"
            )));
        }
        if let Some(media) = &raw.media_type {
            if media != MEDIA_MANIFEST_V2 && media != MEDIA_OCI_MANIFEST {
                return Err(unknown("its media type is not an image manifest's".to_string()));
            }
        }
        let layers = raw.layers.unwrap_or_default();
        for layer in raw.config.iter().chain(layers.iter()) {
            let hex = layer.hex();
            let valid = layer.digest.starts_with("sha256:")
                && hex.len() == 64
                && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            if !valid {
                return Err(unknown(
                    "a layer's digest is not sha256:<64 hex>".to_string(),
                ));
            }
        }
        let models = layers
            .iter()
            .filter(|l| l.kind() == LayerKind::Model)
            .count();
        if models != 1 {
            return Err(unknown(format!(
                "it has {models} model layers; one is needed"
            )));
        }
        Ok(RegistryManifest {
            config: raw.config,
            layers,
        })
    }

    /// The config first (as Ollama pulls it), then the layers in manifest order.
    pub fn all_blobs(&self) -> Vec<LayerDescriptor> {
        self.config
            .iter()
            .chain(self.layers.iter())
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn manifest(layers: &str) -> String {
        format!(
            r#"{{"schemaVersion":2,"mediaType":"{MEDIA_MANIFEST_V2}",
            "config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:{HEX}","size":10}},
            "layers":[{layers}]}}"#
        )
    }

    #[test]
    fn a_model_manifest_sorts_its_layers() {
        let text = manifest(&format!(
            r#"{{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:{HEX}","size":100}},
               {{"mediaType":"application/vnd.ollama.image.params","digest":"sha256:{HEX}","size":5}}"#
        ));
        let parsed = RegistryManifest::parse(text.as_bytes(), "x").unwrap();
        let kinds: Vec<LayerKind> = parsed
            .all_blobs()
            .iter()
            .map(LayerDescriptor::kind)
            .collect();
        assert_eq!(
            kinds,
            [LayerKind::Config, LayerKind::Model, LayerKind::Params]
        );
        assert_eq!(parsed.layers[0].status(), "pulling 0123456789ab");
    }

    #[test]
    fn unknown_schemas_and_bad_digests_are_refused() {
        let refused = |body: &str| match RegistryManifest::parse(body.as_bytes(), "m:t") {
            Err(ManifestError::Refused(error)) => error.to_string(),
            other => panic!("{other:?}"),
        };
        let v1 = r#"{"schemaVersion":1,"fsLayers":[]}"#;
        let error = refused(v1);
        assert!(
            error.contains("schemaVersion is 1") && error.contains("m:t"),
            "{error}"
        );
        let bad = manifest(
            r#"{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:../x","size":1}"#,
        );
        let error = refused(&bad);
        assert!(error.contains("not sha256") && !error.contains("../x"), "{error}");
        let none = manifest("");
        let error = refused(&none);
        assert!(error.contains("0 model layers"), "{error}");
        let media = r#"{"schemaVersion":2,"mediaType":"text/SECRET"}"#;
        let error = refused(media);
        assert!(error.contains("media type") && !error.contains("SECRET"), "{error}");
    }

    #[test]
    fn an_answer_that_is_no_manifest_is_told_apart_for_the_log_only() {
        for body in ["<html>SECRET</html>", "SSH-2.0-OpenSSH", r#"{"status":"ok"}"#, "[]"] {
            assert!(
                matches!(
                    RegistryManifest::parse(body.as_bytes(), "m"),
                    Err(ManifestError::NotAManifest(_))
                ),
                "{body}"
            );
        }
    }
}
