//! Model pulls: from a registry that speaks Ollama's protocol (Ollama's own, `hf.co`, a local
//! one) or from a GGUF URL, into the store, resumable and verified.
//!
//! A pull reports Ollama's progress steps (`pulling manifest`, `pulling <digest>` per layer
//! with bytes done, `verifying sha256 digest`, `writing manifest`, `success`), downloads the
//! model layer with [`download`] (parallel ranged parts, streaming sha256, resume, one download
//! per blob however many pulls ask), reads the small layers (params, system, template,
//! license) into the model's [`ModelExtras`], and registers it only once every digest matched.
//!
//! A pull registers its model under the name the source gives it (`reference.rs`: another
//! registry's host stays in the name), may update a model it pulled before, and never replaces
//! a model that came from elsewhere ([`PullError::WouldReplace`]). Where it may connect and
//! which redirects it follows is the operator's choice (`policy.rs`), and its errors never
//! repeat what a server sent (`http.rs`).
//!
//! Key items: [`pull`], [`PullError`], [`PullReport`], [`reference::PullSource`],
//! [`service::StoreAdmin`] (the daemon's `ModelAdmin`). Costs: see `download.rs`; the small
//! layers are read into memory (at most [`MAX_SMALL_LAYER`] bytes each).

pub mod download;
pub mod http;
pub mod manifest;
pub mod modelfile;
pub mod policy;
pub mod reference;
pub mod service;

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::core::PullProgress;
use crate::gguf::read_gguf_facts;
use crate::store::{BlobSource, Manifest, ModelExtras, ModelName, Store, StoreError};
use download::{BlobRequest, Downloaded};
use http::{get_with_retries, transport_error, Http, StatusVerdict, SMALL_REQUEST_TIMEOUT};
use manifest::{LayerDescriptor, LayerKind, RegistryManifest};
use reference::{PullSource, RegistryName, RegistrySettings};

/// Largest non-model layer read into memory.
pub const MAX_SMALL_LAYER: usize = 4 << 20;
/// Pull leftovers older than this are deleted by `llamay prune` and at daemon start-up.
pub const STALE_PARTIAL: Duration = Duration::from_secs(24 * 60 * 60);

#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("invalid model name '{name}': {reason}")]
    InvalidName { name: String, reason: String },
    #[error("{what} was not found in the registry (check the name and tag)")]
    NotFound { what: String },
    #[error(
        "the registry refused access to {url} ({status}): the model is private or needs a login"
    )]
    Unauthorized { url: String, status: u16 },
    #[error("the manifest of '{model}' is of a kind llamay does not read: {reason}")]
    UnknownManifest { model: String, reason: String },
    #[error("{what}: downloaded bytes do not match the digest (expected {expected}, got {actual}); the download was deleted and nothing was registered")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("the disk is full writing {}{detail}; the store is unchanged and {}", path.display(),
        if *kept { "what was downloaded is kept: free space, then pull again to resume" }
        else { "nothing of the download is left on disk: free space, then pull again" })]
    DiskFull {
        path: PathBuf,
        /// Whether the partial download stays for a resume.
        kept: bool,
        /// What was short, when known (`: it needs 1.2 GiB and 300 MiB are free`).
        detail: String,
    },
    #[error("could not download {url}: {reason}")]
    Network { url: String, reason: String },
    #[error(
        "{host} is unreachable, or what answers there is not {expected} (the log has the \
         details){hint}"
    )]
    Unreachable {
        host: String,
        expected: &'static str,
        hint: &'static str,
    },
    #[error(
        "{url} redirected to a location llamay does not follow: it follows only https, or plain \
         http to a registry the operator allows, and never from a public address to a \
         loopback, private or link-local one"
    )]
    RedirectRefused { url: String },
    #[error(
        "plain http to {host} is not allowed: the operator allows it per registry (the serve \
         setting insecure_registries, -insecure-registry or LLAMAY_INSECURE_REGISTRIES; \
         `llamay pull -insecure` when no daemon runs); a request's `insecure` cannot"
    )]
    InsecureRefused { host: String },
    #[error(
        "'{name}' is installed from {existing}; pulling {pulling} would replace it with \
         another model. Remove it first (`llamay rm {name}`), or keep it under another name \
         (`llamay cp {name} NEW`, then `llamay rm {name}`)"
    )]
    WouldReplace {
        name: String,
        existing: String,
        pulling: String,
    },
    #[error("could not {context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("{what} is not a usable GGUF model: {reason}")]
    NotGguf { what: String, reason: String },
    #[error("the pull was cancelled; pull again to resume")]
    Cancelled,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a finished pull did.
#[derive(Debug, Clone)]
pub struct PullReport {
    pub manifest: Manifest,
    /// Model bytes fetched over the network by this pull (0 when the store had the blob).
    pub fetched: u64,
    pub hash_time: Duration,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl PullError {
    /// The one error for a registry that gave no usable answer, whatever went wrong.
    fn registry_unreachable(registry: &RegistryName) -> PullError {
        PullError::Unreachable {
            host: registry.host().to_string(),
            expected: "a registry that speaks Ollama's protocol",
            hint: if registry.base.starts_with("https://") {
                "; a registry that serves plain http must be allowed by the operator \
                 (insecure_registries)"
            } else {
                ""
            },
        }
    }

    /// The one error for a file server that gave no usable answer.
    fn server_unreachable(url: &reqwest::Url) -> PullError {
        PullError::Unreachable {
            host: url.host_str().unwrap_or_default().to_string(),
            expected: "a web server",
            hint: "",
        }
    }
}

/// Pulls `input` into `store`. `progress` gets Ollama's steps and returns false to cancel.
pub fn pull(
    store: &Store,
    input: &str,
    settings: &RegistrySettings,
    progress: &mut dyn FnMut(PullProgress) -> bool,
) -> Result<PullReport, PullError> {
    let source = PullSource::parse(input, settings)?;
    let name = source.local_name()?;
    refuse_replacing(store, &name, &source)?;
    let origin = match &source {
        PullSource::Registry(registry) => &registry.base,
        PullSource::Url(url) => url,
    };
    let origin = reqwest::Url::parse(origin).map_err(|e| PullError::InvalidName {
        name: source.display(),
        reason: format!("it is not a URL: {e}"),
    })?;
    let http = Http::new(&origin, settings.http_allowed())?;
    if !progress(PullProgress::status("pulling manifest")) {
        return Err(PullError::Cancelled);
    }
    match &source {
        PullSource::Registry(registry) => pull_registry(store, &http, registry, &name, progress),
        PullSource::Url(url) => pull_url(store, &http, url, &origin, &name, progress),
    }
}

/// A pull updates the model it pulled before; it never replaces one that came from another
/// source (another registry's, a URL's, or a file imported or created here).
fn refuse_replacing(store: &Store, name: &ModelName, source: &PullSource) -> Result<(), PullError> {
    let installed = match store.resolve(name) {
        Ok(installed) => installed,
        Err(StoreError::NotFound { .. }) => return Ok(()),
        Err(error) => return Err(error.into()),
    };
    let wanted = source.display();
    match installed.extras.source {
        Some(existing) if existing.eq_ignore_ascii_case(&wanted) => Ok(()),
        existing => Err(PullError::WouldReplace {
            name: name.to_string(),
            existing: existing.unwrap_or_else(|| "a file imported or created here".to_string()),
            pulling: wanted,
        }),
    }
}

fn layer_progress(layer: &LayerDescriptor, completed: u64) -> PullProgress {
    PullProgress {
        status: layer.status(),
        digest: Some(layer.digest.clone()),
        total: Some(layer.size),
        completed: Some(completed),
    }
}

fn pull_registry(
    store: &Store,
    http: &Http,
    registry: &RegistryName,
    name: &ModelName,
    progress: &mut dyn FnMut(PullProgress) -> bool,
) -> Result<PullReport, PullError> {
    let manifest = RegistryManifest::fetch(http, registry)?;
    let mut extras = ModelExtras {
        source: Some(registry.display()),
        ..ModelExtras::default()
    };
    let mut model: Option<(LayerDescriptor, Option<Downloaded>)> = None;
    for layer in manifest.all_blobs() {
        if !progress(layer_progress(&layer, 0)) {
            return Err(PullError::Cancelled);
        }
        match layer.kind() {
            LayerKind::Model => {
                let downloaded = fetch_model_layer(store, http, registry, &layer, progress)?;
                model = Some((layer, downloaded));
            }
            kind => {
                let bytes = fetch_small_layer(http, registry, &layer)?;
                keep_layer(&mut extras, kind, &bytes, &registry.display())?;
                if !progress(layer_progress(&layer, layer.size)) {
                    return Err(PullError::Cancelled);
                }
            }
        }
    }
    let Some((layer, downloaded)) = model else {
        return Err(PullError::UnknownManifest {
            model: registry.display(),
            reason: "it has no model layer".to_string(),
        });
    };
    finish(
        store,
        name,
        layer.hex(),
        layer.size,
        downloaded,
        extras,
        &registry.display(),
        progress,
    )
}

/// Downloads the model layer unless the store has it; `None` when it does.
fn fetch_model_layer(
    store: &Store,
    http: &Http,
    registry: &RegistryName,
    layer: &LayerDescriptor,
    progress: &mut dyn FnMut(PullProgress) -> bool,
) -> Result<Option<Downloaded>, PullError> {
    let hex = layer.hex().to_string();
    if store.has_blob(&hex, layer.size) {
        progress(layer_progress(layer, layer.size));
        return Ok(None);
    }
    let request = BlobRequest {
        url: registry.blob_url(&layer.digest),
        expected_hex: Some(hex.clone()),
        size: layer.size,
        key: format!("sha256-{hex}"),
        what: format!("{} layer {}", registry.display(), layer.digest),
    };
    let stored = || store.has_blob(&hex, layer.size);
    download::download(
        http,
        &store.pull_dir(),
        &request,
        &stored,
        &mut |done, _| progress(layer_progress(layer, done)),
    )
}

fn fetch_small_layer(
    http: &Http,
    registry: &RegistryName,
    layer: &LayerDescriptor,
) -> Result<Vec<u8>, PullError> {
    let what = format!("{} layer {}", registry.display(), layer.digest);
    if layer.size > MAX_SMALL_LAYER as u64 {
        return Err(PullError::UnknownManifest {
            model: registry.display(),
            reason: format!(
                "its {} layer is {} bytes; llamay reads only the model, params, system, template \
                 and license layers",
                layer.media_type, layer.size
            ),
        });
    }
    let url = registry.blob_url(&layer.digest);
    let mut backoff = http::Backoff::new();
    let bytes = loop {
        let not_found = || PullError::NotFound { what: what.clone() };
        let stopped = || PullError::Network {
            url: url.clone(),
            reason: "the registry stopped answering (the log has the details)".to_string(),
        };
        let response = get_with_retries(http, &url, &[], not_found, stopped)?;
        match http.read_limited(response, MAX_SMALL_LAYER, &url) {
            // A body cut short is retried like a failed connection.
            Ok(bytes) if bytes.len() as u64 == layer.size => break bytes,
            Ok(_) | Err(PullError::Network { .. }) if backoff.wait() => continue,
            Ok(bytes) => break bytes,
            Err(error) => return Err(error),
        }
    };
    let actual = sha256_hex(&bytes);
    if actual != layer.hex() || bytes.len() as u64 != layer.size {
        return Err(PullError::DigestMismatch {
            what,
            expected: layer.digest.clone(),
            actual: format!("sha256:{actual} ({} bytes)", bytes.len()),
        });
    }
    Ok(bytes)
}

fn keep_layer(
    extras: &mut ModelExtras,
    kind: LayerKind,
    bytes: &[u8],
    model: &str,
) -> Result<(), PullError> {
    let text = || String::from_utf8_lossy(bytes).into_owned();
    match kind {
        LayerKind::Params => {
            let parameters: serde_json::Map<String, serde_json::Value> =
                serde_json::from_slice(bytes).map_err(|error| {
                    tracing::warn!(%model, %error, "a params layer that is not a JSON object");
                    PullError::UnknownManifest {
                        model: model.to_string(),
                        reason: "its params layer is not a JSON object".to_string(),
                    }
                })?;
            extras.parameters.extend(parameters);
        }
        LayerKind::System => extras.system = Some(text()),
        LayerKind::Template => extras.template = Some(text()),
        LayerKind::License => extras.license.push(text()),
        LayerKind::Config | LayerKind::Other | LayerKind::Model => {}
    }
    Ok(())
}

/// Checks the GGUF, writes the manifest, and reports the last steps.
#[allow(clippy::too_many_arguments)]
fn finish(
    store: &Store,
    name: &ModelName,
    hex: &str,
    size: u64,
    downloaded: Option<Downloaded>,
    extras: ModelExtras,
    what: &str,
    progress: &mut dyn FnMut(PullProgress) -> bool,
) -> Result<PullReport, PullError> {
    progress(PullProgress::status("verifying sha256 digest"));
    let file = match &downloaded {
        Some(downloaded) => downloaded.path.clone(),
        None => store
            .blob_path_for_hex(hex)
            .ok_or_else(|| PullError::NotGguf {
                what: what.to_string(),
                reason: format!("digest {hex} is not sha256"),
            })?,
    };
    let facts = read_gguf_facts(&file).map_err(|e| PullError::NotGguf {
        what: what.to_string(),
        reason: e.kind.to_string(),
    })?;
    progress(PullProgress::status("writing manifest"));
    let source = match &downloaded {
        Some(downloaded) => BlobSource::File(&downloaded.path),
        None => BlobSource::Stored,
    };
    let manifest = store.register_download(source, hex, size, facts, name, extras)?;
    let (fetched, hash_time) = match downloaded {
        Some(downloaded) => {
            let numbers = (downloaded.fetched, downloaded.hash_time);
            downloaded.finish();
            numbers
        }
        None => (0, Duration::ZERO),
    };
    progress(PullProgress::status("success"));
    Ok(PullReport {
        manifest,
        fetched,
        hash_time,
    })
}

/// A GGUF at a URL: its size from a HEAD, then the same resumable download, keyed by the URL.
fn pull_url(
    store: &Store,
    http: &Http,
    url: &str,
    parsed: &reqwest::Url,
    name: &ModelName,
    progress: &mut dyn FnMut(PullProgress) -> bool,
) -> Result<PullReport, PullError> {
    let not_found = || PullError::NotFound {
        what: url.to_string(),
    };
    let head = http
        .client()
        .head(url)
        .timeout(SMALL_REQUEST_TIMEOUT)
        .send()
        .map_err(|error| {
            transport_error(url, &error, || PullError::server_unreachable(parsed))
        })?;
    match http::judge(head.status(), url, &not_found) {
        StatusVerdict::Ok => {}
        StatusVerdict::Fail(error) => return Err(error),
        StatusVerdict::Retry(status) | StatusVerdict::Unexpected(status) => {
            return Err(PullError::Network {
                url: url.to_string(),
                reason: format!("the server answered {status}"),
            })
        }
    }
    let size = head
        .headers()
        .get(reqwest::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&size| size > 0)
        .ok_or_else(|| PullError::Network {
            url: url.to_string(),
            reason: "the server did not say the file's size (Content-Length)".to_string(),
        })?;
    let key = format!("url-{}", sha256_hex(url.as_bytes()));
    let request = BlobRequest {
        url: url.to_string(),
        expected_hex: None,
        size,
        key: key.clone(),
        what: url.to_string(),
    };
    let url_digest = format!("url:{}", &key[4..16]);
    let status = format!("pulling {}", &key[4..16]);
    let report = |done: u64| PullProgress {
        status: status.clone(),
        digest: Some(url_digest.clone()),
        total: Some(size),
        completed: Some(done),
    };
    if !progress(report(0)) {
        return Err(PullError::Cancelled);
    }
    let never = || false;
    let downloaded =
        download::download(http, &store.pull_dir(), &request, &never, &mut |done, _| {
            progress(report(done))
        })?
        .ok_or(PullError::Cancelled)?;
    let hex = downloaded.hex.clone();
    let extras = ModelExtras {
        source: Some(url.to_string()),
        ..ModelExtras::default()
    };
    // A URL download is keyed by its URL; once registered, its state goes with it.
    let result = finish(
        store,
        name,
        &hex,
        size,
        Some(downloaded),
        extras,
        url,
        progress,
    );
    if result.is_err() {
        let _ = std::fs::remove_file(store.pull_dir().join(format!("{key}.partial")));
        let _ = std::fs::remove_file(store.pull_dir().join(format!("{key}.state")));
    }
    result
}

/// Deletes pull leftovers older than [`STALE_PARTIAL`]; returns the bytes freed.
pub fn prune(store: &Store) -> u64 {
    download::prune(&store.pull_dir(), STALE_PARTIAL)
}
