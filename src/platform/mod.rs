//! The operating-system calls llamay makes outside llama.cpp, in one place so that every
//! `unsafe` block outside `llm/` is here: the allocator's tuning for a long-lived daemon, the
//! open-file limit its connections need, and a process-existence check for lock files. Both are Linux/Unix specifics with a portable
//! fallback.
//!
//! Key functions: [`limit_heap_retention`], [`raise_open_file_limit`], [`process_exists`]. Cost: one system call each.

/// Allocator arenas a daemon keeps (glibc's default is 8 per core). One: with two, a 10-minute
/// soak of the store-backed daemon still grew 28% as its thread count rose; with one it held flat.
/// The daemon's hot path (llama.cpp's compute) allocates little, so one lock costs little.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_ARENAS: i32 = 1;
/// Blocks at least this large are mapped and unmapped on their own (glibc's default start).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_MMAP_THRESHOLD: i32 = 256 * 1024;

/// Keeps glibc's heap from growing with the daemon's age. By default it gives each thread that
/// allocates concurrently an arena of its own (up to 8 per core), and raises its mmap threshold
/// to the largest block freed so far (up to 32 MiB), after which the transient megabytes of a
/// large body, a long prompt's tokens or a model load are carved from those arenas and stay
/// resident as fragments once freed: a soak with model switches grew by a fifth in minutes.
/// One arena and a fixed threshold return large blocks to the system as they are freed.
/// `MALLOC_ARENA_MAX` / `MALLOC_MMAP_THRESHOLD_` in the environment still win. Call it before
/// the daemon's threads start.
pub fn limit_heap_retention(environment: &crate::environment::Environment) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if !environment.malloc_arena_max_set {
            // SAFETY: mallopt only sets allocator parameters; it is called before the daemon's
            // threads start, so no allocation races with the change.
            unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS) };
        }
        if !environment.malloc_mmap_threshold_set {
            // SAFETY: as above.
            unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD) };
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = environment;
}

/// Files the daemon keeps open besides its connections: models, the store, pipes, logs.
const FILES_BESIDES_CONNECTIONS: u64 = 256;

/// Raises the soft limit on open files to what `connections` need (at most the hard limit;
/// many systems start services at 1024, which `max_connections` alone would use up), and
/// warns when the hard limit is lower still.
pub fn raise_open_file_limit(connections: usize) {
    #[cfg(not(unix))]
    let _ = connections;
    #[cfg(unix)]
    {
        let needed = (connections as u64).saturating_add(FILES_BESIDES_CONNECTIONS);
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes one rlimit into the struct we own.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return;
        }
        let current = limit.rlim_cur as u64;
        if current >= needed {
            return;
        }
        let raised = needed.min(limit.rlim_max as u64);
        if raised > current {
            limit.rlim_cur = raised as libc::rlim_t;
            // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the hard
            // one needs no privilege.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
                return;
            }
        }
        if raised < needed {
            tracing::warn!(
                open_files = raised,
                needed,
                "the open-file limit is below what max_connections needs; connections past it wait to be accepted (raise the hard limit: ulimit -Hn, LimitNOFILE=)"
            );
        }
    }
}

/// Whether a process with this id exists (signal 0 checks without sending anything; EPERM
/// means it exists under another user).
#[cfg(unix)]
pub fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only reports whether the process exists.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Without a way to ask, a recorded process is assumed alive: a stale lock is then kept rather
/// than a live one broken.
#[cfg(not(unix))]
pub fn process_exists(_pid: u32) -> bool {
    true
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn this_process_exists_and_an_unused_id_does_not() {
        assert!(process_exists(std::process::id()));
        assert!(!process_exists(0));
        // Linux's pid_max is at most 2^22; ids above it are never in use.
        assert!(!process_exists(1 << 30));
    }
}
