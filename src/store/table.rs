//! The `llamay list` table: NAME, ID, SIZE, MODIFIED, in the shape `ollama list` prints.
//!
//! Key items: [`render_list_table`], [`UnixSeconds`], [`human_size`] (decimal units: "98 MB"),
//! [`human_age`] ("2 minutes ago"). Cost: one pass over the manifests; pure functions.

use std::time::{SystemTime, UNIX_EPOCH};

use super::Manifest;

const COLUMN_GAP: usize = 4;

/// A moment as whole seconds since the Unix epoch (what [`Manifest::added_at`] holds), so the
/// table can be rendered against `u64`, `SystemTime` or chrono's `DateTime<Utc>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnixSeconds(pub u64);

impl From<u64> for UnixSeconds {
    fn from(seconds: u64) -> Self {
        UnixSeconds(seconds)
    }
}

impl From<SystemTime> for UnixSeconds {
    fn from(time: SystemTime) -> Self {
        UnixSeconds(time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()))
    }
}

impl From<chrono::DateTime<chrono::Utc>> for UnixSeconds {
    fn from(time: chrono::DateTime<chrono::Utc>) -> Self {
        UnixSeconds(u64::try_from(time.timestamp()).unwrap_or(0))
    }
}

/// Renders `manifests` in the given order, ages measured up to `now`.
pub fn render_list_table(manifests: &[Manifest], now: impl Into<UnixSeconds>) -> String {
    let UnixSeconds(now) = now.into();
    let header = ["NAME", "ID", "SIZE", "MODIFIED"].map(str::to_string);
    let rows: Vec<[String; 4]> = manifests
        .iter()
        .map(|m| [m.name.to_string(), m.short_id(), human_size(m.size), human_age(m.added_at, now)])
        .collect();
    let mut widths = header.clone().map(|cell| cell.len());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (index, (cell, width)) in row.iter().zip(widths).enumerate() {
            line.push_str(cell);
            if index + 1 < row.len() {
                let pad = width - cell.chars().count() + COLUMN_GAP;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A byte count in decimal units, as model sizes are usually quoted: "98 MB", "4.7 GB".
/// Values of ten or more units are shown whole; smaller ones keep one decimal.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] =
        [("TB", 1_000_000_000_000), ("GB", 1_000_000_000), ("MB", 1_000_000), ("KB", 1_000)];
    for (unit, scale) in UNITS {
        if bytes >= scale {
            let value = bytes as f64 / scale as f64;
            return if value >= 10.0 || bytes.is_multiple_of(scale) {
                format!("{} {unit}", value.round() as u64)
            } else {
                format!("{value:.1} {unit}")
            };
        }
    }
    format!("{bytes} B")
}

/// How long ago `then` was, both in Unix seconds: "Less than a second ago", "2 minutes ago".
pub fn human_age(then: u64, now: u64) -> String {
    const MINUTE: u64 = 60;
    const HOUR: u64 = 60 * MINUTE;
    const DAY: u64 = 24 * HOUR;
    const WEEK: u64 = 7 * DAY;
    const MONTH: u64 = 30 * DAY;
    const YEAR: u64 = 365 * DAY;
    let age = now.saturating_sub(then);
    let count = |n: u64, unit: &str| format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" });
    match age {
        0 => "Less than a second ago".to_string(),
        a if a < MINUTE => count(a, "second"),
        a if a < 2 * MINUTE => "About a minute ago".to_string(),
        a if a < HOUR => count(a / MINUTE, "minute"),
        a if a < 2 * HOUR => "About an hour ago".to_string(),
        a if a < 2 * DAY => count(a / HOUR, "hour"),
        a if a < 2 * WEEK => count(a / DAY, "day"),
        a if a < 2 * MONTH => count(a / WEEK, "week"),
        a if a < 2 * YEAR => count(a / MONTH, "month"),
        a => count(a / YEAR, "year"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufFacts;
    use crate::store::ModelName;

    fn manifest(name: &str, hex_digit: char, size: u64, added_at: u64) -> Manifest {
        Manifest {
            name: ModelName::parse(name).expect("valid"),
            digest: format!("sha256:{}", hex_digit.to_string().repeat(64)),
            size,
            facts: GgufFacts {
                architecture: "llama".into(),
                parameter_count: 1,
                quantization: "Q4_1".into(),
                context_length: None,
                has_chat_template: false,
                chat_template: None,
                name: None,
                embedding: Some(false),
            },
            added_at,
            extras: Default::default(),
        }
    }

    #[test]
    fn sizes_use_decimal_units() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(999), "999 B");
        assert_eq!(human_size(1_000), "1 KB");
        assert_eq!(human_size(1_500), "1.5 KB");
        assert_eq!(human_size(98_000_000), "98 MB");
        assert_eq!(human_size(98_764_320), "99 MB");
        assert_eq!(human_size(253_114_400), "253 MB");
        assert_eq!(human_size(4_700_000_000), "4.7 GB");
        assert_eq!(human_size(2_000_000_000_000), "2 TB");
    }

    #[test]
    fn ages_read_like_ollama() {
        let now = 1_000_000_000;
        assert_eq!(human_age(now, now), "Less than a second ago");
        assert_eq!(human_age(now + 5, now), "Less than a second ago");
        assert_eq!(human_age(now - 1, now), "1 second ago");
        assert_eq!(human_age(now - 30, now), "30 seconds ago");
        assert_eq!(human_age(now - 90, now), "About a minute ago");
        assert_eq!(human_age(now - 150, now), "2 minutes ago");
        assert_eq!(human_age(now - 3_700, now), "About an hour ago");
        assert_eq!(human_age(now - 5 * 3_600, now), "5 hours ago");
        assert_eq!(human_age(now - 3 * 86_400, now), "3 days ago");
        assert_eq!(human_age(now - 21 * 86_400, now), "3 weeks ago");
        assert_eq!(human_age(now - 90 * 86_400, now), "3 months ago");
        assert_eq!(human_age(now - 3 * 365 * 86_400, now), "3 years ago");
    }

    #[test]
    fn the_table_aligns_columns_under_the_header() {
        let now = 10_000;
        let rows = [
            manifest("smollm2:135m", 'a', 98_000_000, now - 120),
            manifest("gemma3:270m", 'b', 253_000_000, now),
        ];
        let table = render_list_table(&rows, now);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("NAME"));
        for (column, header) in ["ID", "SIZE", "MODIFIED"].iter().enumerate() {
            let at = lines[0].find(header).expect("header column");
            let cells = [
                ["aaaaaaaaaaaa", "98 MB", "2 minutes ago"],
                ["bbbbbbbbbbbb", "253 MB", "Less than a second ago"],
            ];
            for (line, row) in lines[1..].iter().zip(cells) {
                assert_eq!(line.find(row[column]), Some(at), "{header} in {line:?}");
            }
        }
        assert!(lines[1].starts_with("smollm2:135m "));
        assert!(lines.iter().all(|l| !l.ends_with(' ')));
    }

    #[test]
    fn now_can_be_given_as_seconds_system_time_or_chrono() {
        let rows = [manifest("m", 'c', 1, 1_700_000_000)];
        let later = 1_700_000_000 + 3 * 3_600;
        let expected = render_list_table(&rows, later);
        assert!(expected.contains("3 hours ago"), "{expected}");
        let system = UNIX_EPOCH + std::time::Duration::from_secs(later);
        assert_eq!(render_list_table(&rows, system), expected);
        let chrono_now = chrono::DateTime::from_timestamp(later as i64, 0).expect("valid");
        assert_eq!(render_list_table(&rows, chrono_now), expected);
        assert_eq!(UnixSeconds::from(chrono::DateTime::from_timestamp(-5, 0).expect("valid")).0, 0);
    }

    #[test]
    fn an_empty_store_prints_only_the_header() {
        assert_eq!(render_list_table(&[], 0), "NAME    ID    SIZE    MODIFIED\n");
    }
}
