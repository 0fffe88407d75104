//! The Prometheus text exposition format (0.0.4) as `/metrics` writes it: `# HELP`/`# TYPE`
//! lines, samples with escaped labels, and cumulative histograms with `+Inf`, `_sum` and `_count`.
//!
//! Key type: [`Histogram`] (fixed upper bounds, counts kept per bucket and summed when written).
//! Cost: a sample is one short `String` append; a histogram writes a line per bucket.

use std::fmt::Write as _;

/// A cumulative histogram with fixed upper bounds.
#[derive(Debug, Clone)]
pub(super) struct Histogram {
    bounds: &'static [f64],
    /// Observations at or below each bound (not cumulative; summed when rendered).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub(super) fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub(super) fn observe(&mut self, seconds: f64) {
        if let Some(index) = self.bounds.iter().position(|bound| seconds <= *bound) {
            self.counts[index] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }
}

pub(super) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

pub(super) fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    write_labels(out, labels, None);
    let _ = writeln!(out, " {}", number(value));
}

fn write_labels(out: &mut String, labels: &[(&str, &str)], le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (key, value) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
        if !first {
            out.push(',');
        }
        first = false;
        let _ = write!(out, "{key}=\"{}\"", escape_label(value));
    }
    out.push('}');
}

pub(super) fn render_histogram(
    out: &mut String,
    name: &str,
    labels: &[(&str, &str)],
    histogram: &Histogram,
) {
    let mut cumulative = 0;
    for (bound, count) in histogram.bounds.iter().zip(&histogram.counts) {
        cumulative += count;
        out.push_str(name);
        out.push_str("_bucket");
        write_labels(out, labels, Some(&number(*bound)));
        let _ = writeln!(out, " {cumulative}");
    }
    out.push_str(name);
    out.push_str("_bucket");
    write_labels(out, labels, Some("+Inf"));
    let _ = writeln!(out, " {}", histogram.count);
    let _ = write!(out, "{name}_sum");
    write_labels(out, labels, None);
    let _ = writeln!(out, " {}", number(histogram.sum));
    let _ = write!(out, "{name}_count");
    write_labels(out, labels, None);
    let _ = writeln!(out, " {}", histogram.count);
}

/// A sample value as the text format writes it.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{value}")
    }
}

/// Label values escape backslash, double quote and line feed.
fn escape_label(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            other => escaped.push(other),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: [f64; 12] = [
        0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ];

    #[test]
    fn histogram_buckets_are_cumulative_and_end_in_inf() {
        let mut histogram = Histogram::new(&BOUNDS);
        histogram.observe(0.02);
        histogram.observe(0.3);
        histogram.observe(1000.0);
        let mut out = String::new();
        render_histogram(&mut out, "x_seconds", &[("model", "a\"b")], &histogram);
        assert!(
            out.contains("x_seconds_bucket{model=\"a\\\"b\",le=\"0.01\"} 0\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{model=\"a\\\"b\",le=\"0.025\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{model=\"a\\\"b\",le=\"0.5\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{model=\"a\\\"b\",le=\"60\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{model=\"a\\\"b\",le=\"+Inf\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_count{model=\"a\\\"b\"} 3\n"),
            "{out}"
        );
    }
}
