//! Writability probes: opening the store creates and deletes a file in `blobs/`, since creating
//! a directory can succeed where writing in it fails. A process killed between the two leaves
//! its probe behind; [`probe_is_leftover`] tells such a leftover from a probe another process
//! is using right now, so the sweep and `doctor` remove only leftovers.
//!
//! Key items: [`probe_writable`], [`probe_is_leftover`], [`PROBE_PREFIX`]. Cost: one create and
//! one delete per open; one `stat` and one signal-0 `kill` per probe found.

use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Probe files are named `.probe-<pid>-<serial>`.
pub(super) const PROBE_PREFIX: &str = ".probe-";

/// Creates and deletes a file in `dir`: creating a directory can succeed where writing in it
/// fails (a read-only mount, or permissions when not root).
pub(super) fn probe_writable(dir: &Path) -> io::Result<()> {
    // Unique per open, not just per process: two threads opening the store at once must not
    // delete each other's probe.
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let serial = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = dir.join(format!("{PROBE_PREFIX}{}-{serial}", std::process::id()));
    File::create(&probe)?;
    // Gone already is fine: another process took it for a dead writer's (its pid is not one
    // that process can see, as across containers sharing the store), and the create proved
    // the directory writable.
    match fs::remove_file(&probe) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// A probe younger than this may belong to a process opening the store right now, when its
/// name does not say which process wrote it or that process id is in use again.
const PROBE_GRACE: Duration = Duration::from_secs(60);

/// Whether the probe at `path` is left by a process killed between writing and deleting it:
/// the process its name names is gone, or the probe is older than [`PROBE_GRACE`].
pub(super) fn probe_is_leftover(path: &Path) -> bool {
    let writer = path
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.strip_prefix(PROBE_PREFIX))
        .and_then(|rest| rest.split('-').next())
        .and_then(|pid| pid.parse::<u32>().ok());
    if writer.is_some_and(|pid| !process_exists(pid)) {
        return true;
    }
    let age = fs::symlink_metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|modified| SystemTime::now().duration_since(modified).ok());
    age.is_some_and(|age| age > PROBE_GRACE)
}

/// Whether a process with this id exists (signal 0 checks without sending anything; EPERM
/// means it exists under another user).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only reports whether the process exists.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}
