//! How far each configuration is from an accepting one, as more methods of
//! [`CompiledGrammar`]: the length in bytes of the shortest byte string that completes the
//! document, and that string. A token budget closes the document along it (see
//! `lexicon/constraint.rs`).
//!
//! At compile time each rule's shortest derivation is found (Knuth's generalisation of
//! Dijkstra to grammars: an alternative's length is known once every rule it calls is, and a
//! rule takes its shortest alternative's), then per grammar position the shortest length of the
//! rest of its alternative ([`Distances`]). A stack's distance is the sum over its frames (each
//! frame is the position to continue at, the top one included), and a configuration's is the
//! least over its stacks. That is exact: frames are independent once the stack is fixed,
//! whitespace is never required (it counts nothing), and bounded repetitions are rules of their
//! own (`counters.rs`), so a count already spent is where the frame stands.
//!
//! Endings are written in [`closing_bytes`] only (ASCII text and UTF-8 continuation bytes):
//! every vocabulary served has each of them as a token of its own, where some lack a few
//! others (SmolLM2 has no token of the lone bytes 0xF1 and 0xF2), and one token per byte is
//! the bound the sampler closes by. A terminal with none of those bytes counts as a way that
//! no ending takes.
//!
//! Key types: [`Distances`], [`NO_ENDING`], [`closing_bytes`]. Cost: compiling adds a pass over the symbols and a
//! heap operation per rule; a configuration's distance is one lookup per frame; the shortest
//! ending is one byte step per byte class per byte of it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{CompiledGrammar, FlatSymbol};
use crate::ir::ByteSet;

/// The distance of a configuration from which no accepting one can be reached (the dead
/// configuration, or a rule that never finishes); also the cap of every sum.
pub const NO_ENDING: u32 = u32::MAX - 1;

/// The bytes an ending is written in: tab, line feed, carriage return, printable ASCII, and
/// the UTF-8 continuation bytes (a character begun must be finished).
pub fn closing_bytes() -> ByteSet {
    let mut bytes = ByteSet::range(0x20, 0x7e);
    bytes.insert_range(0x80, 0xbf);
    for byte in [b'\t', b'\n', b'\r'] {
        bytes.insert(byte);
    }
    bytes
}

/// Per grammar position, the fewest bytes that finish the alternative from there.
#[derive(Debug, Default)]
pub(crate) struct Distances {
    rest: Box<[u32]>,
}

impl Distances {
    /// Computes the shortest derivation of every rule of the flattened grammar, then the rest
    /// of each alternative from each position.
    pub(super) fn new(symbols: &[FlatSymbol], alt_starts: &[u32], alt_ranges: &[(u32, u32)]) -> Distances {
        let rule_count = alt_ranges.len();
        // Per alternative: the rule it belongs to, the calls not yet measured, and the bytes
        // of what is measured so far.
        let mut owner = vec![0u32; alt_starts.len()];
        for (rule, &(lo, hi)) in alt_ranges.iter().enumerate() {
            for slot in &mut owner[lo as usize..hi as usize] {
                *slot = rule as u32;
            }
        }
        let mut unmeasured = vec![0u32; alt_starts.len()];
        let mut measured = vec![0u32; alt_starts.len()];
        // Per rule, the alternatives calling it (once per call).
        let mut callers: Vec<Vec<u32>> = vec![Vec::new(); rule_count];
        let mut shortest = vec![NO_ENDING; rule_count];
        let mut settled = vec![false; rule_count];
        let mut ready = BinaryHeap::new();
        let closing = closing_bytes();
        let writable = |set: &ByteSet| !set.intersect(&closing).is_empty();
        for (alternative, &start) in alt_starts.iter().enumerate() {
            let mut position = start as usize;
            let mut possible = true;
            loop {
                match symbols[position] {
                    FlatSymbol::End => break,
                    FlatSymbol::Bytes(set) => {
                        possible &= writable(&set);
                        measured[alternative] = measured[alternative].saturating_add(1);
                    }
                    FlatSymbol::Whitespace => {}
                    FlatSymbol::Rule(rule) => {
                        unmeasured[alternative] += 1;
                        if let Some(list) = callers.get_mut(rule as usize) {
                            list.push(alternative as u32);
                        }
                    }
                }
                position += 1;
            }
            if !possible {
                // Never ready: no ending writes this terminal.
                unmeasured[alternative] = u32::MAX;
            } else if unmeasured[alternative] == 0 {
                ready.push(Reverse((measured[alternative].min(NO_ENDING), owner[alternative])));
            }
        }
        while let Some(Reverse((length, rule))) = ready.pop() {
            let rule = rule as usize;
            if settled[rule] {
                continue;
            }
            settled[rule] = true;
            shortest[rule] = length;
            for &alternative in &callers[rule] {
                let alternative = alternative as usize;
                if unmeasured[alternative] == u32::MAX {
                    continue;
                }
                measured[alternative] = measured[alternative].saturating_add(length).min(NO_ENDING);
                unmeasured[alternative] -= 1;
                if unmeasured[alternative] == 0 && !settled[owner[alternative] as usize] {
                    ready.push(Reverse((measured[alternative], owner[alternative])));
                }
            }
        }
        // Each alternative's rest, from its end back to its start.
        let mut rest = vec![0u32; symbols.len()];
        for position in (0..symbols.len()).rev() {
            let after = rest.get(position + 1).copied().unwrap_or(0);
            rest[position] = match symbols[position] {
                FlatSymbol::End => 0,
                FlatSymbol::Whitespace => after,
                FlatSymbol::Bytes(set) if !writable(&set) => NO_ENDING,
                FlatSymbol::Bytes(_) => after.saturating_add(1).min(NO_ENDING),
                FlatSymbol::Rule(rule) => {
                    after.saturating_add(shortest.get(rule as usize).copied().unwrap_or(NO_ENDING)).min(NO_ENDING)
                }
            };
        }
        Distances { rest: rest.into_boxed_slice() }
    }

    /// The fewest bytes that finish the alternative from `position`.
    #[inline]
    fn rest(&self, position: u32) -> u32 {
        self.rest.get(position as usize).copied().unwrap_or(NO_ENDING)
    }
}

impl CompiledGrammar {
    /// The length in bytes of the shortest byte string that takes `config` to an accepting
    /// configuration: 0 when it accepts, [`NO_ENDING`] when none does (the dead configuration).
    pub(crate) fn distance(&self, config: &[u32]) -> u32 {
        super::decode(config)
            .map(|(_, frames)| {
                frames.iter().fold(0u32, |sum, &position| sum.saturating_add(self.distances.rest(position)))
            })
            .min()
            .unwrap_or(NO_ENDING)
            .min(NO_ENDING)
    }

    /// The length in bytes of the shortest document of this grammar.
    pub fn shortest_document_len(&self) -> u32 {
        self.distance(&self.initial)
    }

    /// The shortest byte string that takes `config` to an accepting configuration, found by
    /// stepping, byte after byte, to a successor one byte nearer (printable ASCII preferred,
    /// then the lowest byte, among [`closing_bytes`]); `None` when there is none or a step
    /// passes a limit.
    pub(crate) fn shortest_ending(&self, config: &[u32]) -> Option<Vec<u8>> {
        let mut distance = self.distance(config);
        if distance == NO_ENDING {
            return None;
        }
        let mut config = config.to_vec();
        let mut ending = Vec::with_capacity(distance as usize);
        while distance > 0 {
            let readable = self.allowed_bytes(&config);
            let mut next: Option<(u8, Vec<u32>)> = None;
            // One byte per class the configuration can read, the preferred one first.
            let mut tried = vec![false; self.class_count()];
            let closing = closing_bytes();
            let preferred = (b' '..=b'~').chain([b'\n', b'\t', b'\r']).chain(0x80..=0xbf);
            for byte in preferred {
                let class = self.byte_class[byte as usize] as usize;
                if !readable.contains(byte) || !closing.contains(byte) || tried.get(class).copied().unwrap_or(true) {
                    continue;
                }
                tried[class] = true;
                // A step past a limit is a way the automaton cannot go.
                let Ok(stepped) = self.step(&config, byte) else { continue };
                if self.distance(&stepped) < distance {
                    next = Some((byte, stepped));
                    break;
                }
            }
            let (byte, stepped) = next?;
            ending.push(byte);
            distance = self.distance(&stepped);
            config = stepped;
        }
        Some(ending)
    }

    /// The shortest document of this grammar (see [`CompiledGrammar::shortest_ending`]),
    /// found once and kept.
    pub fn shortest_document(&self) -> Option<&[u8]> {
        self.shortest_document.get_or_init(|| self.shortest_ending(&self.initial).map(Vec::into_boxed_slice)).as_deref()
    }
}

#[cfg(test)]
mod tests {
    use crate::automaton::config_is_accepting;
    use crate::gbnf::compile_gbnf;
    use crate::limits::Limits;
    use crate::schema::compile_schema;
    use crate::CompiledGrammar;

    fn gbnf(source: &str) -> CompiledGrammar {
        compile_gbnf(source.as_bytes(), &Limits::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn schema(value: serde_json::Value) -> CompiledGrammar {
        let ir = compile_schema(&value).unwrap_or_else(|e| panic!("{e}"));
        CompiledGrammar::new(ir, &Limits::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn ending_after(grammar: &CompiledGrammar, prefix: &[u8]) -> (u32, String) {
        let mut config = grammar.initial_config().to_vec();
        for &byte in prefix {
            config = grammar.step(&config, byte).unwrap_or_else(|e| panic!("{e:?}"));
            assert!(!config.is_empty(), "{:?} died", String::from_utf8_lossy(prefix));
        }
        let ending = grammar.shortest_ending(&config).unwrap_or_else(|| panic!("no ending"));
        let distance = grammar.distance(&config);
        assert_eq!(ending.len() as u32, distance, "the ending is as long as the distance says");
        for &byte in &ending {
            config = grammar.step(&config, byte).unwrap_or_else(|e| panic!("{e:?}"));
        }
        assert!(config_is_accepting(&config), "{:?} + {:?} does not accept", prefix, ending);
        (distance, String::from_utf8_lossy(&ending).into_owned())
    }

    #[test]
    fn a_grammar_closes_along_its_shortest_derivation() {
        let grammar = gbnf("root ::= \"(\" inner \")\" | \"abcdef\"\ninner ::= \"xy\" | root");
        assert_eq!(grammar.shortest_document_len(), 4);
        assert_eq!(ending_after(&grammar, b""), (4, "(xy)".to_string()));
        assert_eq!(ending_after(&grammar, b"(("), (4, "xy))".to_string()));
        assert_eq!(ending_after(&grammar, b"abc"), (3, "def".to_string()));
    }

    #[test]
    fn a_schema_closes_its_strings_and_adds_the_required_properties() {
        let grammar = schema(serde_json::json!({
            "type": "object",
            "properties": {"name": {"type": "string", "minLength": 2}, "tags": {"type": "array", "items": {"type": "integer"}}},
            "required": ["name", "tags"],
            "additionalProperties": false
        }));
        let (_, whole) = ending_after(&grammar, b"");
        let value: serde_json::Value = serde_json::from_str(&whole).unwrap_or_else(|e| panic!("{whole}: {e}"));
        assert_eq!(value["name"].as_str().map(str::len), Some(2));
        assert_eq!(value["tags"], serde_json::json!([]));
        let prefix = b"{\"name\": \"a";
        let (_, rest) = ending_after(&grammar, prefix);
        let text = format!("{}{rest}", String::from_utf8_lossy(prefix));
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(value["tags"], serde_json::json!([]));
    }

    #[test]
    fn an_accepting_configuration_is_at_distance_zero_and_the_dead_one_has_no_ending() {
        let grammar = gbnf("root ::= [0-9]+");
        assert_eq!(ending_after(&grammar, b"12"), (0, String::new()));
        assert_eq!(grammar.distance(&[]), super::NO_ENDING);
        assert_eq!(grammar.shortest_ending(&[]), None);
    }
}
