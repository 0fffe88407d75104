//! The text form of each kind of setting value, shared by the config file, the `LLAMAY_*`
//! environment variables and the flags, so all three accept the same spellings and refuse the
//! same mistakes with the same [`ConfigError`].
//! Costs: parsed once at start-up.

use std::str::FromStr;
use std::time::Duration;

use super::ConfigError;
use crate::core::KeepAlive;
use crate::llm::KvType;

/// `1, 1,2` -> `[1.0, 1.0, 2.0]`; empty means by free memory.
pub(super) fn parse_split(text: &str) -> Result<Vec<f64>, ConfigError> {
    text.split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| {
            r.parse::<f64>().map_err(|_| ConfigError::Invalid {
                key: "split",
                value: r.to_string(),
                expected: "comma-separated ratios, the local CPU first, then each rpc worker (1,1,2)",
            })
        })
        .collect()
}

/// A `host` or `host:port` (`[v6]` or `[v6]:port`), as a model name writes a registry and a
/// client writes `Host`.
pub(super) fn valid_host_and_port(text: &str) -> bool {
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => (host, Some(port)),
        _ => (text, None),
    };
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host.len() <= 255
                && host.starts_with(|c: char| c.is_ascii_alphanumeric())
                && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        }
    };
    host_ok && port.is_none_or(|port| port.parse::<u16>().is_ok_and(|p| p > 0))
}

/// `a:1, b:2` -> `["a:1", "b:2"]`; empty pieces dropped, so `-rpc ""` means none.
pub(super) fn split_workers(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|w| !w.is_empty()).map(str::to_string).collect()
}

/// `formats`: `enforce` makes a schema's `format` constrain strings; `ignore` (the default)
/// leaves it an annotation.
pub fn parse_formats(text: &str) -> Result<crate::grammar::schema::FormatMode, ConfigError> {
    use crate::grammar::schema::FormatMode;
    match text.trim() {
        "enforce" => Ok(FormatMode::Enforce),
        "ignore" => Ok(FormatMode::Ignore),
        _ => Err(ConfigError::Invalid {
            key: "formats",
            value: text.to_string(),
            expected: "enforce or ignore",
        }),
    }
}

/// `lexicon_match`: how a deny list's entries match (word, prefix or substring), as the
/// grammar crate's `MatchMode` reads it.
pub(super) fn parse_lexicon_match(text: &str) -> Result<crate::grammar::MatchMode, ConfigError> {
    text.trim().parse().map_err(|_| ConfigError::Invalid {
        key: "lexicon_match",
        value: text.to_string(),
        expected: crate::grammar::MatchMode::NAMES,
    })
}


/// `-kv` and its file and environment spellings, with the config's error.
pub(super) fn parse_kv(text: &str) -> Result<KvType, ConfigError> {
    text.trim().parse().map_err(|_| ConfigError::Invalid {
        key: "kv",
        value: text.to_string(),
        expected: "f32, f16, q8_0 or q4_0",
    })
}

/// `-context-memory` and its spellings: bytes, or a number with KiB/MiB/GiB (or K/M/G).
pub(super) fn parse_memory(key: &'static str, text: &str) -> Result<u64, ConfigError> {
    let invalid = || ConfigError::Invalid {
        key,
        value: text.to_string(),
        expected: "a size such as 2GiB, 512MiB or a number of bytes",
    };
    let trimmed = text.trim();
    let digits = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let number: u64 = number.parse().map_err(|_| invalid())?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(invalid()),
    };
    number.checked_mul(scale).ok_or_else(invalid)
}

/// `-flash-attn` and its file and environment spellings.
pub fn parse_on_off(key: &'static str, text: &str) -> Result<bool, ConfigError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(ConfigError::Invalid { key, value: text.to_string(), expected: "on or off" }),
    }
}

pub(super) fn parse_env<T: FromStr>(
    env: &impl Fn(&str) -> Option<String>,
    variable: &str,
    key: &'static str,
    slot: &mut T,
) -> Result<(), ConfigError> {
    if let Some(value) = env_number(env, variable, key)? {
        *slot = value;
    }
    Ok(())
}

/// The whole number in `variable`, when it is set.
pub(super) fn env_number<T: FromStr>(
    env: &impl Fn(&str) -> Option<String>,
    variable: &str,
    key: &'static str,
) -> Result<Option<T>, ConfigError> {
    let Some(text) = env(variable) else { return Ok(None) };
    match text.trim().parse() {
        Ok(value) => Ok(Some(value)),
        Err(_) => Err(ConfigError::Invalid { key, value: text, expected: "a whole number" }),
    }
}

/// A positive duration: `"5s"`, `"1m30s"` or seconds.
pub(super) fn parse_timeout(key: &'static str, text: &str) -> Result<Duration, ConfigError> {
    match text.parse::<KeepAlive>() {
        Ok(KeepAlive::For(duration)) if duration >= Duration::from_millis(100) => Ok(duration),
        _ => Err(ConfigError::Invalid {
            key,
            value: text.to_string(),
            expected: "a duration of at least 100ms, such as \"5s\", \"2m\" or seconds",
        }),
    }
}

/// `a, b,c` as a list, blanks dropped.
pub(super) fn split_origins(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|origin| !origin.is_empty())
        .map(str::to_string)
        .collect()
}

/// `*`, or `http(s)://host[:port]` as browsers send it in `Origin`.
pub(super) fn valid_origin(origin: &str) -> bool {
    if origin == "*" {
        return true;
    }
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    !rest.is_empty()
        && rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']' | '_'))
}

/// A key a header can carry unchanged: visible ASCII, no spaces, bounded.
pub(super) fn valid_api_key(key: &str) -> bool {
    (1..=1024).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

/// `gpu_layers` (`-ngl`): a layer count, `all`, or `auto` / `-1` for as many as fit
/// (`None`). Shared with `llamay run -ngl`.
pub fn parse_gpu_layers(text: &str) -> Result<Option<u32>, ConfigError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "auto" | "-1" => Ok(None),
        "all" => Ok(Some(u32::MAX)),
        number => number.parse::<u32>().map(Some).map_err(|_| ConfigError::Invalid {
            key: "gpu_layers",
            value: text.to_string(),
            expected: "a number of layers, all, or auto (-1): as many as fit the GPU's free memory",
        }),
    }
}

pub(super) fn parse_keepalive(text: &str) -> Result<KeepAlive, ConfigError> {
    text.parse().map_err(|_| ConfigError::Invalid {
        key: "keepalive",
        value: text.to_string(),
        expected: "a duration such as \"5m\", seconds, 0 or -1",
    })
}

