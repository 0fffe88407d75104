//! The process environment, read once: the `LLAMAY_*` variables every command shares (the store
//! home, the default registry, the daemon address and key a client uses) and the few variables
//! of other programs that change what llamay does (`HOME`, glibc's `MALLOC_*` tunables).
//! A room of the ground floor, importing nothing of ours, so that `store`, `pull` and
//! `platform` read the environment without reaching up to `config`. Only this room and
//! `config/` read the environment: `serve`'s own `LLAMAY_*` keys are applied in
//! `config::Config::load` over the config file.
//!
//! Key types: [`Environment`], [`environment`]. Cost: one read of a handful of variables on
//! first use, then a shared reference.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Where the model store lives when nothing else is said: `$LLAMAY_HOME`, else `~/.llamay`.
pub const HOME_ENV: &str = "LLAMAY_HOME";
/// The default registry (a host, or a URL with its scheme).
pub const REGISTRY_ENV: &str = "LLAMAY_REGISTRY";
/// The address a client command looks for a daemon at.
pub const ADDR_ENV: &str = "LLAMAY_ADDR";
/// The key a client command sends, the same one `serve` requires.
pub const API_KEY_ENV: &str = "LLAMAY_API_KEY";
/// A daemon's address when `LLAMAY_ADDR` is not set (also `serve`'s default).
pub const DEFAULT_ADDR: &str = "localhost:11435";

/// The environment as llamay reads it.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    llamay_home: Option<OsString>,
    user_home: Option<OsString>,
    registry: Option<String>,
    daemon_addr: Option<String>,
    api_key: Option<String>,
    /// Whether the user tuned glibc's allocator themselves (then llamay leaves it alone).
    pub malloc_arena_max_set: bool,
    pub malloc_mmap_threshold_set: bool,
}

impl Environment {
    /// Reads the variables through `var` (the process's own in [`environment`]; a map in tests).
    pub fn read(var: impl Fn(&str) -> Option<OsString>) -> Environment {
        let text = |key: &str| {
            var(key)
                .and_then(|value| value.into_string().ok())
                .map(|value| value.trim().to_string())
                .filter(|value| !value.is_empty())
        };
        Environment {
            llamay_home: var(HOME_ENV).filter(|home| !home.is_empty()),
            user_home: var("HOME").filter(|home| !home.is_empty()),
            registry: text(REGISTRY_ENV),
            daemon_addr: text(ADDR_ENV),
            api_key: text(API_KEY_ENV),
            malloc_arena_max_set: var("MALLOC_ARENA_MAX").is_some(),
            malloc_mmap_threshold_set: var("MALLOC_MMAP_THRESHOLD_").is_some(),
        }
    }

    /// The store home: `$LLAMAY_HOME` when set and non-empty, else `$HOME/.llamay`, else
    /// `.llamay` in the working directory.
    pub fn store_home(&self) -> PathBuf {
        match (&self.llamay_home, &self.user_home) {
            (Some(home), _) => PathBuf::from(home),
            (None, Some(user_home)) => PathBuf::from(user_home).join(".llamay"),
            (None, None) => PathBuf::from(".llamay"),
        }
    }

    /// `$LLAMAY_HOME`, when it is set (tests that need the real models skip without it).
    pub fn llamay_home(&self) -> Option<PathBuf> {
        self.llamay_home.as_ref().map(PathBuf::from)
    }

    /// The user's home directory, for `~/` in paths a shell did not expand.
    pub fn user_home(&self) -> Option<PathBuf> {
        self.user_home.as_ref().map(PathBuf::from)
    }

    /// `$LLAMAY_REGISTRY`, when set.
    pub fn registry(&self) -> Option<&str> {
        self.registry.as_deref()
    }

    /// The daemon a client command talks to, as a base URL (`http://` added to a bare address).
    pub fn daemon_base_url(&self) -> String {
        let addr = self.daemon_addr.as_deref().unwrap_or(DEFAULT_ADDR);
        if addr.starts_with("http://") || addr.starts_with("https://") {
            addr.trim_end_matches('/').to_string()
        } else {
            format!("http://{addr}")
        }
    }

    pub fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }
}

/// This process's environment, read on first use.
pub fn environment() -> &'static Environment {
    static ENVIRONMENT: OnceLock<Environment> = OnceLock::new();
    ENVIRONMENT.get_or_init(|| Environment::read(|key| std::env::var_os(key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Environment {
        Environment::read(|key| {
            pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| OsString::from(*v))
        })
    }

    #[test]
    fn the_store_home_follows_llamay_home_then_home() {
        let both = with(&[(HOME_ENV, "/somewhere/else"), ("HOME", "/root")]);
        assert_eq!(both.store_home(), PathBuf::from("/somewhere/else"));
        let empty = with(&[(HOME_ENV, ""), ("HOME", "/root")]);
        assert_eq!(empty.store_home(), PathBuf::from("/root/.llamay"));
        assert_eq!(with(&[("HOME", "/home/u")]).store_home(), PathBuf::from("/home/u/.llamay"));
        assert_eq!(with(&[]).store_home(), PathBuf::from(".llamay"));
    }

    #[test]
    fn a_client_finds_the_daemon_at_the_address_it_was_given() {
        assert_eq!(with(&[]).daemon_base_url(), "http://localhost:11435");
        assert_eq!(with(&[(ADDR_ENV, "10.0.0.2:8080")]).daemon_base_url(), "http://10.0.0.2:8080");
        assert_eq!(with(&[(ADDR_ENV, "https://h.example/")]).daemon_base_url(), "https://h.example");
        assert_eq!(with(&[(ADDR_ENV, "  ")]).daemon_base_url(), "http://localhost:11435");
    }

    #[test]
    fn blank_values_count_as_unset() {
        let env = with(&[(API_KEY_ENV, ""), (REGISTRY_ENV, " "), ("MALLOC_ARENA_MAX", "2")]);
        assert_eq!(env.api_key(), None);
        assert_eq!(env.registry(), None);
        assert!(env.malloc_arena_max_set);
        assert!(!env.malloc_mmap_threshold_set);
    }
}
