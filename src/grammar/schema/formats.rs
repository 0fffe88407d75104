//! `format`, enforced on request: the formats whose grammar is an RFC's, as RE2 patterns over
//! the decoded string, compiled like `pattern` (a DFA lowered to rules).
//!
//! By default `format` is an annotation (the spec's choice, as most validators do); with
//! [`FormatMode::Enforce`] these formats constrain the string: `date-time`, `date`, `time`
//! (RFC 3339 §5.6), `email` (RFC 5321 dot-atom local part at a host name with at least two
//! labels; the local part at most 64 octets, as RFC 5321 §4.5.3.1.1 says, in up to four atoms),
//! `uuid` (RFC 4122 text form), `ipv4` (dotted quad without leading zeros), `ipv6`
//! (RFC 4291 §2.2, every `::` compression, with an IPv4 tail), `hostname` (RFC 1123 labels of
//! 1-63 characters), `uri` (RFC 3986 absolute URI with a scheme, unreserved, reserved and
//! percent-encoded characters). Other formats stay annotations.
//!
//! Key items: [`FormatMode`], [`format_pattern`]. Cost: one pattern DFA per formatted string
//! schema (a few hundred states at most).

/// Whether `format` constrains strings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FormatMode {
    /// An annotation, as the spec says by default.
    #[default]
    Ignore,
    /// The formats [`format_pattern`] knows are enforced; others stay annotations.
    Enforce,
}

/// RFC 3339 §5.7: the day is bounded by its month, and February 29 needs a leap year
/// (divisible by 4, and by 400 for centuries). Validators such as pydantic refuse 2023-02-29
/// and 2024-04-31, so the grammar must not let a model write them.
const DATE: &str = concat!(
    r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))",
    r"|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)"
);
const TIME: &str = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]{1,9})?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
const LABEL: &str = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const OCTET: &str = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
const HEX4: &str = r"[0-9A-Fa-f]{1,4}";

/// The anchored RE2 pattern a format's strings must match, when enforced and known.
pub fn format_pattern(format: &str) -> Option<String> {
    let ipv4 = format!(r"(?:{OCTET}\.){{3}}{OCTET}");
    let hostname = format!(r"{LABEL}(?:\.{LABEL})*");
    Some(match format {
        "date" => format!("^{DATE}$"),
        "time" => format!("^{TIME}$"),
        "date-time" => format!("^{DATE}[Tt]{TIME}$"),
        "uuid" => r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"
            .to_string(),
        "ipv4" => format!("^{ipv4}$"),
        "ipv6" => format!("^{}$", ipv6(&ipv4)),
        "hostname" => format!("^{hostname}$"),
        "email" => {
            // RFC 5321 §4.5.3.1.1 caps the local part at 64 octets and validators (pydantic's
            // email-validator) refuse longer ones; without a cap a small model can repeat
            // `.Doe` until its token budget runs out. A regular expression cannot bound a
            // dot-atom's total length exactly without exponential text, so the local part is a
            // dot-atom of up to four atoms whose widths keep it within 64 octets, and the
            // domain has at most five labels: every address generated validates.
            let atext = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
            let local = format!(
                r"(?:{atext}{{1,64}}|{atext}{{1,31}}\.{atext}{{1,32}}|{atext}{{1,20}}(?:\.{atext}{{1,20}}){{2}}|{atext}{{1,15}}(?:\.{atext}{{1,15}}){{3}})"
            );
            // The top-level label ends with a letter (RFC 3696 §2: not all-numeric), as
            // email-validator requires.
            let top = r"(?:[A-Za-z]|[A-Za-z0-9][A-Za-z0-9-]{0,61}[A-Za-z])";
            format!(r"^{local}@{LABEL}(?:\.{LABEL}){{0,3}}\.{top}$")
        }
        "uri" => {
            // scheme ":" then unreserved / reserved / percent-encoded characters.
            r"^[A-Za-z][A-Za-z0-9+.-]*:(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*$"
                .to_string()
        }
        _ => return None,
    })
}

/// RFC 4291 §2.2 text forms: eight groups, or fewer around one `::`, the last 32 bits
/// optionally written as an IPv4 address.
fn ipv6(ipv4: &str) -> String {
    let mut forms = Vec::new();
    // Full forms: 8 groups, or 6 groups and an IPv4 tail.
    forms.push(format!("(?:{HEX4}:){{7}}{HEX4}"));
    forms.push(format!("(?:{HEX4}:){{6}}{ipv4}"));
    // Compressed: `before` groups, `::`, `after` groups, with before + after <= 7 (<= 5 with
    // an IPv4 tail, which takes two groups' room).
    for (groups, tail) in [(7usize, None), (5usize, Some(ipv4))] {
        for before in 0..=groups {
            let head = match before {
                0 => String::new(),
                n => format!("(?:{HEX4}:){{{}}}{HEX4}", n - 1),
            };
            let most_after = groups - before;
            let rest = match (most_after, tail) {
                (0, None) => String::new(),
                (0, Some(ipv4)) => ipv4.to_string(),
                (n, None) => format!("(?:{HEX4}(?::{HEX4}){{0,{}}})?", n - 1),
                (n, Some(ipv4)) => format!("(?:{HEX4}:){{0,{n}}}{ipv4}"),
            };
            forms.push(format!("{head}::{rest}"));
        }
    }
    format!("(?:{})", forms.join("|"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(format: &str, text: &str) -> bool {
        let pattern = format_pattern(format).unwrap_or_default();
        regex_automata::meta::Regex::new(&pattern).is_ok_and(|re| re.is_match(text))
    }

    #[test]
    fn each_format_accepts_its_rfc_form_and_rejects_others() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "date",
                &["2024-02-29", "2000-02-29", "1999-12-31", "2024-04-30", "2024-02-28"],
                &["2024-13-01", "24-01-01", "2024-01-32", "2024-04-31", "2023-02-29", "1900-02-29", "2024-02-30"],
            ),
            (
                "time",
                &["10:20:30Z", "23:59:60.123+02:30"],
                &["24:00:00Z", "10:20:30", "10:20Z"],
            ),
            (
                "date-time",
                &["2032-04-23T10:20:30.400+02:30", "2032-04-23t10:20:30z"],
                &["2032-04-23 10:20:30Z"],
            ),
            (
                "uuid",
                &["123e4567-e89b-12d3-a456-426614174000"],
                &["123e4567e89b12d3a456426614174000"],
            ),
            (
                "ipv4",
                &["192.168.0.1", "0.0.0.0"],
                &["256.1.1.1", "01.2.3.4", "1.2.3"],
            ),
            (
                "ipv6",
                &[
                    "::1",
                    "fe80::1:2",
                    "2001:db8:0:0:0:0:2:1",
                    "::ffff:10.0.0.1",
                    "1::",
                ],
                &["1:2:3:4:5:6:7:8:9", "1::2::3", ":::"],
            ),
            (
                "hostname",
                &["example.com", "a-b.c"],
                &["-a.com", "a..b", "a_b.com"],
            ),
            (
                "email",
                &["jane.doe+x@mail.example.org", "first.middle.last@a.b.c.d.e"],
                &[
                    "jane@localhost",
                    "a@@b.com",
                    ".a@b.com",
                    "a..b@c.com",
                    "a@b.c1",
                    "doe.doe.doe.doe.doe.doe.doe.doe.doe.doe.doe.doe.doe.doe@c.com",
                ],
            ),
            (
                "uri",
                &["https://example.com/a?b=c#d", "urn:isbn:0451450523"],
                &["no scheme", "http://a b"],
            ),
        ];
        for (format, good, bad) in cases {
            for text in *good {
                assert!(matches(format, text), "{format} should accept {text}");
            }
            for text in *bad {
                assert!(!matches(format, text), "{format} should reject {text}");
            }
        }
        assert!(format_pattern("regex").is_none());
    }
}
