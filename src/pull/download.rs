//! One blob, downloaded so that a person can trust it: in parallel ranged parts, hashed while
//! it arrives, resumed after any interruption, and fetched once however many pulls want it.
//!
//! Files, under the store's `tmp/pulls/` (named by the blob's digest, or by the hash of its URL
//! when the digest is not known in advance): `<key>.partial` (the blob, preallocated to its full
//! size so a full disk shows before a byte is fetched), `<key>.state` (how many bytes of each
//! part are on disk, saved every couple of seconds after an fsync of the partial, so a resumed
//! pull never trusts bytes that are not there) and `<key>.lock` (an exclusive `flock` held by
//! whoever downloads the blob: a second pull, in this process or another, waits on it, shows
//! the first one's progress from the state file, and then finds the blob done).
//!
//! Hashing: a follower thread reads the partial behind the writers, up to the end of the prefix
//! that is complete, so the sha256 is ready as the last part lands (on a resume it first reads
//! back what is already on disk). A mismatch deletes the partial and its state.
//!
//! Key types: [`BlobRequest`], [`Downloaded`], [`download`]. Costs: up to [`MAX_PARALLEL`]
//! connections and threads per blob, 256 KiB buffers each, one extra read of the blob from the
//! page cache for the hash.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fs2::FileExt as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::http::{error_chain, judge, redirect_refused, Backoff, Http, StatusVerdict};
use super::PullError;

/// Most parts of one blob fetched at once.
pub const MAX_PARALLEL: usize = 4;
/// Blobs up to this size are fetched in one part.
const MIN_PART: u64 = 16 << 20;
/// Parts are never bigger than this, so a resume re-fetches little.
const MAX_PART: u64 = 256 << 20;
const BUFFER: usize = 256 << 10;
const STATE_EVERY: Duration = Duration::from_secs(2);
/// How often progress is reported.
const TICK: Duration = Duration::from_millis(100);
/// How soon the end of the last part is noticed (a whole small blob takes a few of these).
const POLL: Duration = Duration::from_millis(2);

/// What to download.
pub struct BlobRequest {
    pub url: String,
    /// The sha256 the bytes must have (64 hex), when the source says it in advance.
    pub expected_hex: Option<String>,
    pub size: u64,
    /// Names the partial, state and lock files.
    pub key: String,
    /// The model and layer, for messages.
    pub what: String,
}

/// A complete, verified blob in the pull directory. The lock stays held until this is dropped,
/// so the caller moves the file into the store before another pull may look at it.
pub struct Downloaded {
    pub path: PathBuf,
    pub hex: String,
    pub size: u64,
    /// Bytes fetched over the network by this call (less than `size` after a resume).
    pub fetched: u64,
    /// Time spent inside sha256 (the hashing CPU cost).
    pub hash_time: Duration,
    state_path: PathBuf,
    _lock: File,
}

impl Downloaded {
    /// Removes what is left of the download once the blob has moved into the store (the lock
    /// file stays: deleting it could split two waiting pulls onto different locks).
    pub fn finish(self) {
        let _ = fs::remove_file(&self.state_path);
        let _ = fs::remove_file(&self.path);
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct SavedState {
    size: u64,
    part_size: u64,
    done: Vec<u64>,
}

struct Parts {
    size: u64,
    part_size: u64,
    done: Vec<AtomicU64>,
}

impl Parts {
    fn count(size: u64, part_size: u64) -> usize {
        size.div_ceil(part_size).max(1) as usize
    }

    fn range(&self, index: usize) -> (u64, u64) {
        let start = index as u64 * self.part_size;
        (start, (start + self.part_size).min(self.size))
    }

    fn completed(&self) -> u64 {
        self.done.iter().map(|d| d.load(Ordering::Acquire)).sum()
    }

    /// End of the complete prefix: the hasher may read up to here.
    fn watermark(&self) -> u64 {
        let mut mark = 0;
        for index in 0..self.done.len() {
            let (start, end) = self.range(index);
            let done = self.done[index].load(Ordering::Acquire);
            mark = start + done;
            if start + done < end {
                break;
            }
        }
        mark
    }

    fn saved(&self) -> SavedState {
        SavedState {
            size: self.size,
            part_size: self.part_size,
            done: self
                .done
                .iter()
                .map(|d| d.load(Ordering::Acquire))
                .collect(),
        }
    }
}

fn part_size_for(size: u64) -> u64 {
    if size <= MIN_PART {
        return size.max(1);
    }
    (size / 16).clamp(MIN_PART, MAX_PART)
}

fn read_state(path: &Path, size: u64) -> Option<SavedState> {
    let state: SavedState = serde_json::from_slice(&fs::read(path).ok()?).ok()?;
    let sane = state.size == size
        && state.part_size > 0
        && state.done.len() == Parts::count(size, state.part_size)
        && state.done.iter().enumerate().all(|(i, &d)| {
            let start = i as u64 * state.part_size;
            d <= (start + state.part_size).min(size) - start
        });
    sane.then_some(state)
}

fn write_state(path: &Path, state: &SavedState) -> io::Result<()> {
    let temporary = path.with_extension("state-new");
    fs::write(
        &temporary,
        serde_json::to_vec(state).map_err(io::Error::other)?,
    )?;
    fs::rename(&temporary, path)
}

/// `error` from `action` on `path`; a full disk says whether the partial download stays.
fn io_error(path: &Path, action: &str, error: io::Error, kept: bool) -> PullError {
    if crate::store::is_disk_full(&error) {
        PullError::DiskFull {
            path: path.to_path_buf(),
            kept,
            detail: String::new(),
        }
    } else {
        PullError::Io {
            context: format!("{action} {}", path.display()),
            source: error,
        }
    }
}

/// Downloads `request` into `tmp`. `progress(completed, total)` is called every tick and
/// returns false to cancel (the partial stays for a later resume). While another pull holds the
/// blob, this one waits and reports that pull's progress; `already_stored()` is asked once the
/// wait is over, and `Ok(None)` means the other pull finished the blob.
pub fn download(
    http: &Http,
    tmp: &Path,
    request: &BlobRequest,
    already_stored: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<Option<Downloaded>, PullError> {
    fs::create_dir_all(tmp).map_err(|e| io_error(tmp, "create", e, false))?;
    let lock_path = tmp.join(format!("{}.lock", request.key));
    let state_path = tmp.join(format!("{}.state", request.key));
    let partial_path = tmp.join(format!("{}.partial", request.key));
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| io_error(&lock_path, "open", e, false))?;
    let mut waited = false;
    while lock.try_lock_exclusive().is_err() {
        waited = true;
        let done = read_state(&state_path, request.size).map_or(0, |s| s.done.iter().sum());
        if !progress(done, request.size) {
            return Err(PullError::Cancelled);
        }
        std::thread::sleep(TICK);
    }
    if waited && already_stored() {
        progress(request.size, request.size);
        return Ok(None);
    }

    let (part_size, done) = match read_state(&state_path, request.size) {
        Some(state) if partial_path.is_file() => (state.part_size, state.done),
        _ => {
            let part_size = part_size_for(request.size);
            (part_size, vec![0; Parts::count(request.size, part_size)])
        }
    };
    let file = File::options()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&partial_path)
        .map_err(|e| io_error(&partial_path, "create", e, false))?;
    if request.size > 0 {
        // Reserves the blocks: a full disk fails here, before anything is fetched.
        if let Err(error) = file.allocate(request.size) {
            // fs2 reports posix_fallocate's failure through a stale errno, so the free space
            // decides whether this is a full disk.
            let free = fs2::available_space(tmp).ok().filter(|&free| free < request.size);
            if let Some(free) = free {
                drop(file);
                let _ = fs::remove_file(&partial_path);
                let _ = fs::remove_file(&state_path);
                return Err(PullError::DiskFull {
                    path: partial_path,
                    kept: false,
                    detail: format!(
                        " ({} needs {}, {} are free)",
                        request.what,
                        crate::store::human_size(request.size),
                        crate::store::human_size(free)
                    ),
                });
            }
            return Err(io_error(&partial_path, "allocate", error, true));
        }
    }
    let parts = Parts {
        size: request.size,
        part_size,
        done: done.into_iter().map(AtomicU64::new).collect(),
    };
    write_state(&state_path, &parts.saved()).map_err(|e| io_error(&state_path, "write", e, true))?;
    let resumed_from = parts.completed();

    let stop = AtomicBool::new(false);
    let workers_left = AtomicUsize::new(0);
    let next_part = AtomicUsize::new(0);
    let failure: Mutex<Option<PullError>> = Mutex::new(None);
    let fail = |error: PullError| {
        let mut slot = failure.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(error);
        stop.store(true, Ordering::Release);
    };
    let worker_count = parts.done.len().min(MAX_PARALLEL);
    workers_left.store(worker_count, Ordering::Release);

    let (hash, hash_time) = std::thread::scope(|scope| {
        let hasher = scope.spawn(|| follow_hash(&file, &parts, &stop, &workers_left));
        for _ in 0..worker_count {
            scope.spawn(|| {
                loop {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let index = next_part.fetch_add(1, Ordering::AcqRel);
                    if index >= parts.done.len() {
                        break;
                    }
                    let fetched =
                        fetch_part(http, request, &file, &partial_path, &parts, index, &stop);
                    if let Err(error) = fetched {
                        fail(error);
                        break;
                    }
                }
                workers_left.fetch_sub(1, Ordering::AcqRel);
            });
        }
        let mut saved_at = Instant::now();
        let mut reported_at = Instant::now();
        while workers_left.load(Ordering::Acquire) > 0 {
            std::thread::sleep(POLL);
            if reported_at.elapsed() < TICK {
                continue;
            }
            reported_at = Instant::now();
            if !progress(parts.completed(), request.size) {
                fail(PullError::Cancelled);
            }
            if saved_at.elapsed() >= STATE_EVERY {
                // Only bytes known to be on disk are recorded as done.
                let saved = parts.saved();
                if file.sync_data().is_ok() {
                    let _ = write_state(&state_path, &saved);
                }
                saved_at = Instant::now();
            }
        }
        let saved = parts.saved();
        if file.sync_data().is_ok() {
            let _ = write_state(&state_path, &saved);
        }
        progress(parts.completed(), request.size);
        hasher.join().unwrap_or((None, Duration::ZERO))
    });
    if let Some(error) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(error);
    }
    let Some(hex) = hash else {
        return Err(PullError::Io {
            context: format!("hash {}", partial_path.display()),
            source: io::Error::other("the partial could not be read back"),
        });
    };
    if let Some(expected) = &request.expected_hex {
        if &hex != expected {
            drop(file);
            let _ = fs::remove_file(&partial_path);
            let _ = fs::remove_file(&state_path);
            return Err(PullError::DigestMismatch {
                what: request.what.clone(),
                expected: format!("sha256:{expected}"),
                actual: format!("sha256:{hex}"),
            });
        }
    }
    Ok(Some(Downloaded {
        path: partial_path,
        hex,
        size: request.size,
        fetched: request.size - resumed_from,
        hash_time,
        state_path,
        _lock: lock,
    }))
}

/// Reads the partial behind the writers and hashes it; `None` when the writers stopped before
/// the blob was whole.
fn follow_hash(
    file: &File,
    parts: &Parts,
    stop: &AtomicBool,
    workers_left: &AtomicUsize,
) -> (Option<String>, Duration) {
    let mut hasher = Sha256::new();
    let mut busy = Duration::ZERO;
    let mut buffer = vec![0u8; 1 << 20];
    let mut position = 0u64;
    loop {
        let mark = parts.watermark();
        if position < mark {
            let want = ((mark - position) as usize).min(buffer.len());
            let Some(chunk) = buffer.get_mut(..want) else {
                return (None, busy);
            };
            match file.read_at(chunk, position) {
                Ok(0) | Err(_) => return (None, busy),
                Ok(read) => {
                    let started = Instant::now();
                    hasher.update(&chunk[..read]);
                    busy += started.elapsed();
                    position += read as u64;
                }
            }
            continue;
        }
        if position >= parts.size {
            return (Some(hex::encode(hasher.finalize())), busy);
        }
        let writers_done = workers_left.load(Ordering::Acquire) == 0;
        if (writers_done || stop.load(Ordering::Acquire)) && parts.watermark() == position {
            return (None, busy);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Fetches what is missing of part `index`, retrying cut connections and 5xx answers.
fn fetch_part(
    http: &Http,
    request: &BlobRequest,
    file: &File,
    partial_path: &Path,
    parts: &Parts,
    index: usize,
    stop: &AtomicBool,
) -> Result<(), PullError> {
    let (start, end) = parts.range(index);
    let done = &parts.done[index];
    let not_found = || PullError::NotFound {
        what: request.what.clone(),
    };
    let mut backoff = Backoff::new();
    let mut buffer = vec![0u8; BUFFER];
    loop {
        if stop.load(Ordering::Acquire) {
            return Err(PullError::Cancelled);
        }
        let from = start + done.load(Ordering::Acquire);
        if from >= end {
            return Ok(());
        }
        let outcome = http
            .client()
            .get(&request.url)
            .header("Range", format!("bytes={from}-{}", end - 1))
            .send();
        let reason = match outcome {
            Err(error) if error.is_redirect() => return Err(redirect_refused(&request.url, &error)),
            Err(error) => {
                tracing::debug!(url = %request.url, error = %error_chain(&error), "a blob request failed");
                "the connection failed".to_string()
            }
            Ok(response) => match judge(response.status(), &request.url, &not_found) {
                StatusVerdict::Fail(error) => return Err(error),
                StatusVerdict::Retry(status) => format!("the registry answered {status}"),
                StatusVerdict::Unexpected(status) => {
                    return Err(PullError::Network {
                        url: request.url.clone(),
                        reason: format!("the registry answered {status}"),
                    })
                }
                StatusVerdict::Ok => {
                    // A server that ignores Range sends the whole blob: skip to our offset.
                    let skip = if response.status().as_u16() == 206 {
                        0
                    } else {
                        from
                    };
                    let mut body = response.take(skip + end - from);
                    let mut skipped = 0u64;
                    let mut position = from;
                    let mut failure = None;
                    while position < end {
                        if stop.load(Ordering::Acquire) {
                            return Err(PullError::Cancelled);
                        }
                        match body.read(&mut buffer) {
                            Ok(0) => break,
                            Ok(read) => {
                                let mut chunk = &buffer[..read];
                                if skipped < skip {
                                    let dropped = (skip - skipped).min(read as u64) as usize;
                                    skipped += dropped as u64;
                                    chunk = &chunk[dropped..];
                                }
                                if chunk.is_empty() {
                                    continue;
                                }
                                file.write_all_at(chunk, position)
                                    .map_err(|e| io_error(partial_path, "write", e, true))?;
                                position += chunk.len() as u64;
                                done.fetch_add(chunk.len() as u64, Ordering::AcqRel);
                                backoff.reset();
                            }
                            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                            Err(error) => {
                                tracing::debug!(url = %request.url, %error, "a blob body was cut");
                                failure = Some("the connection was cut".to_string());
                                break;
                            }
                        }
                    }
                    if position >= end {
                        return Ok(());
                    }
                    failure.unwrap_or_else(|| "the connection closed early".to_string())
                }
            },
        };
        tracing::debug!(url = %request.url, part = index, %reason, "retrying a blob part");
        if !backoff.wait() {
            return Err(PullError::Network {
                url: request.url.clone(),
                reason: format!(
                    "{reason} (gave up after {} attempts)",
                    super::http::MAX_ATTEMPTS
                ),
            });
        }
    }
}

/// Deletes pull leftovers (partials, states, locks) not touched for `older_than`; a lock held
/// by a running pull is left alone. Returns the bytes freed.
pub fn prune(tmp: &Path, older_than: Duration) -> u64 {
    let Ok(entries) = fs::read_dir(tmp) else {
        return 0;
    };
    let mut freed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(stem) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        let old = metadata
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age >= older_than);
        if !old {
            continue;
        }
        // A running pull holds the lock: leave its files.
        let lock_path = tmp.join(format!("{stem}.lock"));
        let busy = File::options()
            .write(true)
            .open(&lock_path)
            .is_ok_and(|lock| lock.try_lock_exclusive().is_err());
        if busy {
            continue;
        }
        if fs::remove_file(&path).is_ok() {
            freed += metadata.len();
        }
    }
    freed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_says_whether_the_download_can_resume() {
        let path = Path::new("/store/tmp/pulls/sha256-x.partial");
        let full = || io::Error::from_raw_os_error(libc::ENOSPC);
        let kept = io_error(path, "write", full(), true).to_string();
        assert!(kept.contains("disk is full") && kept.contains("pull again to resume"), "{kept}");
        let gone = io_error(path, "create", full(), false).to_string();
        assert!(gone.contains("disk is full") && !gone.contains("resume"), "{gone}");
        let other = io_error(path, "write", io::Error::from_raw_os_error(libc::EIO), true);
        assert!(matches!(other, PullError::Io { .. }), "{other}");
    }
}
