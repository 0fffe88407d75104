//! A registry that speaks Ollama's registry protocol (the OCI distribution subset `ollama pull`
//! uses) on a loopback port, for tests and the pull benchmark: `GET`/`HEAD
//! /v2/<namespace>/<name>/manifests/<tag>` answers a schema-2 manifest, `GET`/`HEAD
//! /v2/<namespace>/<name>/blobs/sha256:<hex>` the blob, honouring `Range: bytes=a-b`.
//!
//! Key types: [`TestRegistry`] (the running server), [`Layer`] (a blob and its media type),
//! [`Faults`] (switches that make it misbehave the ways real registries and networks do: a
//! missing tag, a blob whose bytes do not match its digest, a connection cut part-way, a slow
//! body, 500s before a success, blobs redirected to another server). [`TestRegistry::blob_bytes_sent`] counts the blob bytes that
//! went out, so a test can tell a resumed pull from a restarted one.
//!
//! Costs: one thread per connection; blobs backed by a file are streamed from it in 256 KiB
//! reads, never held in memory. Plain HTTP/1.1, one request per connection (`Connection: close`).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use sha2::{Digest, Sha256};

pub const MEDIA_MODEL: &str = "application/vnd.ollama.image.model";
pub const MEDIA_TEMPLATE: &str = "application/vnd.ollama.image.template";
pub const MEDIA_SYSTEM: &str = "application/vnd.ollama.image.system";
pub const MEDIA_PARAMS: &str = "application/vnd.ollama.image.params";
pub const MEDIA_LICENSE: &str = "application/vnd.ollama.image.license";
pub const MEDIA_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const MEDIA_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const READ_CHUNK: usize = 256 * 1024;

/// Where a blob's bytes come from.
#[derive(Clone)]
pub enum Content {
    Bytes(Arc<Vec<u8>>),
    File(PathBuf),
}

/// One blob of a model: its media type, bytes, digest and size.
#[derive(Clone)]
pub struct Layer {
    pub media_type: String,
    pub content: Content,
    pub digest: String,
    pub size: u64,
}

impl Layer {
    pub fn bytes(media_type: &str, bytes: impl Into<Vec<u8>>) -> Layer {
        let bytes = bytes.into();
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        Layer {
            media_type: media_type.to_string(),
            size: bytes.len() as u64,
            content: Content::Bytes(Arc::new(bytes)),
            digest,
        }
    }

    /// A layer served from `path`, whose sha256 is computed once here.
    pub fn file(media_type: &str, path: PathBuf) -> io::Result<Layer> {
        let mut file = File::open(&path)?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let read = file.read(&mut buffer)?;
            if read == 0 {
                break;
            }
            hasher.update(&buffer[..read]);
            size += read as u64;
        }
        Ok(Layer {
            media_type: media_type.to_string(),
            content: Content::File(path),
            digest: format!("sha256:{}", hex::encode(hasher.finalize())),
            size,
        })
    }
}

/// What the registry does wrong, switchable while it runs.
#[derive(Default)]
pub struct Faults {
    /// `namespace/name:tag` keys whose manifest answers 404 even though the model exists.
    pub missing_tags: Mutex<HashSet<String>>,
    /// Digests whose blob is served with its last byte flipped (so the digest cannot match).
    pub corrupt_blobs: Mutex<HashSet<String>>,
    /// The next this-many blob responses are closed after half of their body.
    pub cuts_remaining: AtomicU64,
    /// Delay after each 256 KiB of a blob body, in microseconds (0: full speed).
    pub slow_chunk_micros: AtomicU64,
    /// The next this-many requests (of any kind) answer 500.
    pub errors_remaining: AtomicU64,
    /// Status for every manifest request instead of the manifest (401, 403...); 0 for none.
    pub manifest_status: AtomicU64,
    /// Served instead of every manifest when set (an unknown schema, say).
    pub manifest_override: Mutex<Option<String>>,
    /// A base URL (`http://host:port`) every blob request is redirected to (307), as registries
    /// send blobs to a CDN.
    pub redirect_blobs_to: Mutex<Option<String>>,
}

struct Model {
    config: Layer,
    layers: Vec<Layer>,
}

struct Shared {
    models: Mutex<HashMap<String, Arc<Model>>>,
    faults: Faults,
    blob_bytes_sent: AtomicU64,
    requests: Mutex<Vec<String>>,
    stop: AtomicBool,
}

/// A running registry on `127.0.0.1:<port>`; stops when dropped.
pub struct TestRegistry {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl TestRegistry {
    /// Starts an empty registry on a free loopback port (or `port` when not 0).
    pub fn start_on(port: u16) -> io::Result<TestRegistry> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            models: Mutex::new(HashMap::new()),
            faults: Faults::default(),
            blob_bytes_sent: AtomicU64::new(0),
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let accept_shared = Arc::clone(&shared);
        thread::spawn(move || {
            for stream in listener.incoming() {
                if accept_shared.stop.load(Ordering::Acquire) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let shared = Arc::clone(&accept_shared);
                thread::spawn(move || {
                    let _ = serve_connection(stream, &shared);
                });
            }
        });
        Ok(TestRegistry { addr, shared })
    }

    pub fn start() -> io::Result<TestRegistry> {
        Self::start_on(0)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `127.0.0.1:<port>`, the host part of a model name on this registry.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Publishes `layers` as `namespace/name:tag`, with a config blob as Ollama writes one.
    pub fn publish(&self, namespace: &str, name: &str, tag: &str, layers: Vec<Layer>) -> Layer {
        let config = Layer::bytes(
            MEDIA_CONFIG,
            serde_json::to_vec(&serde_json::json!({
                "model_format": "gguf",
                "model_family": "llama",
                "model_type": "135M",
                "file_type": "Q8_0",
                "architecture": "amd64",
                "os": "linux",
                "rootfs": {
                    "type": "layers",
                    "diff_ids": layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>(),
                },
            }))
            .unwrap_or_default(),
        );
        let key = format!("{namespace}/{name}:{tag}");
        let model = Arc::new(Model {
            config: config.clone(),
            layers,
        });
        self.shared
            .models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, model);
        config
    }

    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    pub fn blob_bytes_sent(&self) -> u64 {
        self.shared.blob_bytes_sent.load(Ordering::Acquire)
    }

    /// Request lines seen so far (`GET /v2/...`, with any Range).
    pub fn requests(&self) -> Vec<String> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

struct Request {
    method: String,
    path: String,
    range: Option<(u64, Option<u64>)>,
}

fn read_request(stream: &TcpStream) -> io::Result<Option<Request>> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut range = None;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.trim().eq_ignore_ascii_case("range") {
                range = parse_range(value.trim());
            }
        }
    }
    Ok(Some(Request {
        method,
        path,
        range,
    }))
}

fn parse_range(value: &str) -> Option<(u64, Option<u64>)> {
    let spec = value.strip_prefix("bytes=")?;
    let (start, end) = spec.split_once('-')?;
    let start = start.trim().parse().ok()?;
    let end = if end.trim().is_empty() {
        None
    } else {
        Some(end.trim().parse().ok()?)
    };
    Some((start, end))
}

fn respond(stream: &mut TcpStream, status: u16, content_type: &str, body: &[u8]) -> io::Result<()> {
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        _ => "Error",
    };
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    stream.flush()
}

fn redirect_to(stream: &mut TcpStream, location: &str) -> io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )?;
    stream.flush()
}

fn error_json(code: &str, message: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"errors": [{"code": code, "message": message}]}))
        .unwrap_or_default()
}

fn serve_connection(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    let Some(request) = read_request(&stream)? else {
        return Ok(());
    };
    shared
        .requests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(match request.range {
            Some((start, end)) => format!(
                "{} {} bytes={start}-{}",
                request.method,
                request.path,
                end.map(|e| e.to_string()).unwrap_or_default()
            ),
            None => format!("{} {}", request.method, request.path),
        });
    let faults = &shared.faults;
    if faults
        .errors_remaining
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok()
    {
        return respond(&mut stream, 500, "text/plain", b"injected failure");
    }
    if let Some(file) = request.path.strip_prefix("/files/") {
        // Any `/files/<name>.gguf` is the first published model layer, as a plain download.
        let layer = first_model_layer(shared).filter(|_| file.ends_with(".gguf"));
        let Some(layer) = layer else {
            return respond(&mut stream, 404, "text/plain", b"no such file");
        };
        return send_blob(&mut stream, shared, &layer, &request);
    }
    let Some(rest) = request.path.strip_prefix("/v2/") else {
        return respond(
            &mut stream,
            404,
            "application/json",
            &error_json("NOT_FOUND", "no route"),
        );
    };
    if let Some((repository, tag)) = rest.split_once("/manifests/") {
        return serve_manifest(&mut stream, shared, repository, tag, &request.method);
    }
    if let Some((repository, digest)) = rest.split_once("/blobs/") {
        let redirect = faults
            .redirect_blobs_to
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(base) = redirect {
            return redirect_to(&mut stream, &format!("{base}{}", request.path));
        }
        return serve_blob(&mut stream, shared, repository, digest, &request);
    }
    respond(
        &mut stream,
        404,
        "application/json",
        &error_json("NOT_FOUND", "no route"),
    )
}

fn serve_manifest(
    stream: &mut TcpStream,
    shared: &Shared,
    repository: &str,
    tag: &str,
    method: &str,
) -> io::Result<()> {
    let faults = &shared.faults;
    let status = faults.manifest_status.load(Ordering::Acquire);
    if status != 0 {
        let body = error_json("UNAUTHORIZED", "authentication required");
        return respond(stream, status as u16, "application/json", &body);
    }
    let key = format!("{repository}:{tag}");
    let missing = faults
        .missing_tags
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&key);
    let model = shared
        .models
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    let Some(model) = model.filter(|_| !missing) else {
        let body = error_json("MANIFEST_UNKNOWN", &format!("manifest unknown: {key}"));
        return respond(stream, 404, "application/json", &body);
    };
    if let Some(text) = faults
        .manifest_override
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    {
        return respond(stream, 200, MEDIA_MANIFEST, text.as_bytes());
    }
    let descriptor = |layer: &Layer| serde_json::json!({"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size});
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": descriptor(&model.config),
        "layers": model.layers.iter().map(descriptor).collect::<Vec<_>>(),
    });
    let body = serde_json::to_vec(&manifest).unwrap_or_default();
    if method == "HEAD" {
        return respond(stream, 200, MEDIA_MANIFEST, &[]);
    }
    respond(stream, 200, MEDIA_MANIFEST, &body)
}

fn find_layer(shared: &Shared, repository: &str, digest: &str) -> Option<Layer> {
    let models = shared.models.lock().unwrap_or_else(|p| p.into_inner());
    let prefix = format!("{repository}:");
    models
        .iter()
        .filter(|(key, _)| key.starts_with(&prefix))
        .flat_map(|(_, model)| std::iter::once(&model.config).chain(model.layers.iter()))
        .find(|layer| layer.digest == digest)
        .cloned()
}

fn first_model_layer(shared: &Shared) -> Option<Layer> {
    let models = shared.models.lock().unwrap_or_else(|p| p.into_inner());
    let mut keys: Vec<&String> = models.keys().collect();
    keys.sort();
    keys.iter()
        .filter_map(|key| models.get(*key))
        .flat_map(|model| model.layers.iter())
        .find(|layer| layer.media_type == MEDIA_MODEL)
        .cloned()
}

fn serve_blob(
    stream: &mut TcpStream,
    shared: &Shared,
    repository: &str,
    digest: &str,
    request: &Request,
) -> io::Result<()> {
    let Some(layer) = find_layer(shared, repository, digest) else {
        let body = error_json("BLOB_UNKNOWN", &format!("blob unknown: {digest}"));
        return respond(stream, 404, "application/json", &body);
    };
    send_blob(stream, shared, &layer, request)
}

fn send_blob(
    stream: &mut TcpStream,
    shared: &Shared,
    layer: &Layer,
    request: &Request,
) -> io::Result<()> {
    let digest = layer.digest.as_str();
    let (start, end) = match request.range {
        Some((start, end)) => (start, end.unwrap_or(layer.size.saturating_sub(1))),
        None => (0, layer.size.saturating_sub(1)),
    };
    if layer.size > 0 && (start > end || end >= layer.size) {
        return respond(stream, 416, "text/plain", b"range not satisfiable");
    }
    let length = if layer.size == 0 { 0 } else { end - start + 1 };
    let status_line = if request.range.is_some() {
        format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{end}/{}\r\n",
            layer.size
        )
    } else {
        "HTTP/1.1 200 OK\r\n".to_string()
    };
    write!(
        stream,
        "{status_line}Content-Type: application/octet-stream\r\nContent-Length: {length}\r\n\
         Accept-Ranges: bytes\r\nConnection: close\r\n\r\n"
    )?;
    if request.method == "HEAD" {
        return stream.flush();
    }
    let faults = &shared.faults;
    let cut_at = faults
        .cuts_remaining
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .ok()
        .map(|_| length / 2);
    let corrupt = faults
        .corrupt_blobs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(digest);
    let mut source: Box<dyn Read> = match &layer.content {
        Content::Bytes(bytes) => {
            let slice = bytes
                .get(start as usize..(start + length) as usize)
                .unwrap_or_default();
            Box::new(io::Cursor::new(slice.to_vec()))
        }
        Content::File(path) => {
            let mut file = File::open(path)?;
            file.seek(SeekFrom::Start(start))?;
            Box::new(file.take(length))
        }
    };
    let mut buffer = vec![0u8; READ_CHUNK];
    let mut sent = 0u64;
    while sent < length {
        let want = (length - sent).min(READ_CHUNK as u64) as usize;
        let want = match cut_at {
            Some(cut) if sent + want as u64 > cut => (cut - sent) as usize,
            _ => want,
        };
        if want == 0 {
            break;
        }
        let read = source.read(&mut buffer[..want])?;
        if read == 0 {
            break;
        }
        let chunk = &mut buffer[..read];
        if corrupt && start + sent + read as u64 == layer.size {
            if let Some(last) = chunk.last_mut() {
                *last ^= 0xff;
            }
        }
        stream.write_all(chunk)?;
        sent += read as u64;
        shared
            .blob_bytes_sent
            .fetch_add(read as u64, Ordering::AcqRel);
        let delay = faults.slow_chunk_micros.load(Ordering::Acquire);
        if delay > 0 {
            thread::sleep(Duration::from_micros(delay));
        }
    }
    stream.flush()?;
    if sent < length {
        // A cut connection: the client sees the body end early.
        let _ = stream.shutdown(Shutdown::Both);
    }
    Ok(())
}
