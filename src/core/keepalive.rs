//! How long a model stays loaded after its last request: Ollama's `keep_alive` semantics.
//!
//! `0` unloads as soon as the request ends, a negative value keeps the model forever, and a
//! positive value (seconds as a number, or a Go-style duration string such as `"10m"` or
//! `"1h30m"`) starts an idle timer when the model's last request ends.
//! Key type: [`KeepAlive`]. Parsing is linear in the (bounded) input length.

use std::fmt;
use std::time::Duration;

use thiserror::Error;

/// A keepalive setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    /// Unload when the last request ends.
    UnloadNow,
    /// Stay loaded until evicted or the daemon stops.
    Forever,
    /// Unload after this long idle.
    For(Duration),
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid keep_alive {input:?}: expected seconds or a duration such as \"5m\", \"1h30m\", \"0\" or \"-1\"")]
pub struct KeepAliveParseError {
    pub input: String,
}

/// Longer inputs are not durations anyone writes; refusing them bounds the parse.
const MAX_DURATION_TEXT: usize = 64;

impl KeepAlive {
    /// From seconds, as Ollama reads a JSON number.
    pub fn from_seconds(seconds: f64) -> Result<Self, KeepAliveParseError> {
        if !seconds.is_finite() {
            return Err(KeepAliveParseError {
                input: seconds.to_string(),
            });
        }
        Ok(if seconds < 0.0 {
            KeepAlive::Forever
        } else if seconds == 0.0 {
            KeepAlive::UnloadNow
        } else {
            // Clamp so Duration construction cannot overflow; a century is forever enough.
            KeepAlive::For(Duration::from_secs_f64(seconds.min(3.2e9)))
        })
    }

    /// From a JSON value: a number of seconds or a duration string.
    pub fn from_json(value: &serde_json::Value) -> Result<Self, KeepAliveParseError> {
        match value {
            serde_json::Value::Number(n) => match n.as_f64() {
                Some(seconds) => Self::from_seconds(seconds),
                None => Err(KeepAliveParseError {
                    input: n.to_string(),
                }),
            },
            serde_json::Value::String(s) => s.parse(),
            other => Err(KeepAliveParseError {
                input: other.to_string(),
            }),
        }
    }

    /// The idle duration, `None` for forever; zero for unload-now.
    pub fn idle_duration(self) -> Option<Duration> {
        match self {
            KeepAlive::UnloadNow => Some(Duration::ZERO),
            KeepAlive::Forever => None,
            KeepAlive::For(d) => Some(d),
        }
    }
}

impl std::str::FromStr for KeepAlive {
    type Err = KeepAliveParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = || KeepAliveParseError {
            input: text.chars().take(MAX_DURATION_TEXT).collect(),
        };
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.len() > MAX_DURATION_TEXT {
            return Err(err());
        }
        if let Ok(seconds) = trimmed.parse::<f64>() {
            return Self::from_seconds(seconds).map_err(|_| err());
        }
        let (negative, body) = match trimmed.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
        };
        let seconds = parse_go_duration(body).ok_or_else(err)?;
        if negative && seconds > 0.0 {
            return Ok(KeepAlive::Forever);
        }
        Self::from_seconds(seconds).map_err(|_| err())
    }
}

/// Parses `1h30m`, `5m0s`, `250ms`, `1.5h` into seconds.
fn parse_go_duration(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut position = 0;
    let mut total = 0.0;
    if bytes.is_empty() {
        return None;
    }
    while position < bytes.len() {
        let number_start = position;
        while position < bytes.len()
            && (bytes[position].is_ascii_digit() || bytes[position] == b'.')
        {
            position += 1;
        }
        let number: f64 = text.get(number_start..position)?.parse().ok()?;
        let unit_start = position;
        while position < bytes.len()
            && !(bytes[position].is_ascii_digit() || bytes[position] == b'.')
        {
            position += 1;
        }
        let scale = match text.get(unit_start..position)? {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * scale;
    }
    Some(total)
}

impl fmt::Display for KeepAlive {
    /// Go's `time.Duration` style (`5m0s`), as the spec's banner prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepAlive::UnloadNow => write!(f, "0s"),
            KeepAlive::Forever => write!(f, "-1"),
            KeepAlive::For(duration) => {
                let total = duration.as_secs();
                let (hours, minutes, seconds) = (total / 3600, (total % 3600) / 60, total % 60);
                if hours > 0 {
                    write!(f, "{hours}h{minutes}m{seconds}s")
                } else if minutes > 0 {
                    write!(f, "{minutes}m{seconds}s")
                } else if total > 0 {
                    write!(f, "{seconds}s")
                } else {
                    write!(f, "{}ms", duration.as_millis())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_ollama_forms() {
        assert_eq!("0".parse(), Ok(KeepAlive::UnloadNow));
        assert_eq!("-1".parse(), Ok(KeepAlive::Forever));
        assert_eq!("-1m".parse(), Ok(KeepAlive::Forever));
        assert_eq!("10m".parse(), Ok(KeepAlive::For(Duration::from_secs(600))));
        assert_eq!(
            "1h30m".parse(),
            Ok(KeepAlive::For(Duration::from_secs(5400)))
        );
        assert_eq!("5m0s".parse(), Ok(KeepAlive::For(Duration::from_secs(300))));
        assert_eq!(
            "250ms".parse(),
            Ok(KeepAlive::For(Duration::from_millis(250)))
        );
        assert_eq!(
            KeepAlive::from_json(&json!(30)),
            Ok(KeepAlive::For(Duration::from_secs(30)))
        );
        assert_eq!(KeepAlive::from_json(&json!(-5)), Ok(KeepAlive::Forever));
        assert_eq!(KeepAlive::from_json(&json!(0)), Ok(KeepAlive::UnloadNow));
    }

    #[test]
    fn refuses_nonsense_without_panicking() {
        for bad in [
            "",
            "m",
            "10x",
            "1h-3m",
            "..s",
            "5 m",
            "ha",
            "µ",
            "1e400h",
            &"9".repeat(100),
        ] {
            assert!(
                bad.parse::<KeepAlive>().is_err(),
                "{bad:?} should be refused"
            );
        }
        assert!(KeepAlive::from_json(&json!(true)).is_err());
        assert!(KeepAlive::from_json(&json!(null)).is_err());
    }

    #[test]
    fn displays_like_go() {
        assert_eq!(KeepAlive::For(Duration::from_secs(300)).to_string(), "5m0s");
        assert_eq!(
            KeepAlive::For(Duration::from_secs(3725)).to_string(),
            "1h2m5s"
        );
        assert_eq!(KeepAlive::For(Duration::from_secs(45)).to_string(), "45s");
    }
}
