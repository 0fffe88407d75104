//! What compiling learns of a grammar's shape before any byte is read: the byte classes
//! every terminal treats alike (the state table's row width), and left recursion (a cycle of
//! rules that would expand forever), refused.
//!
//! Key functions: [`byte_classes`], [`find_left_recursion`]. Cost: the classes, a sort of the
//! terminals' sets and a pass per distinct set; the recursion check, one pass over the
//! symbols and a depth-first search over the rules.

use super::{whitespace_set, FlatSymbol};
use crate::ir::{rules_satisfying, ByteSet, Grammar, Symbol};

/// Splits the 256 byte values into classes that every terminal of the grammar treats alike.
/// Distinct sets are found by sorting (a grammar repeats a few dozen sets over many thousand
/// symbols); each then refines the partition with a table lookup per byte.
pub(super) fn byte_classes(symbols: &[FlatSymbol]) -> ([u8; 256], Vec<u8>) {
    let mut sets: Vec<[u64; 4]> = symbols
        .iter()
        .filter_map(|s| match s {
            FlatSymbol::Bytes(set) => Some(set.0),
            _ => None,
        })
        .collect();
    sets.push(whitespace_set().0);
    sets.sort_unstable();
    sets.dedup();
    let mut class_of = [0u16; 256];
    let mut class_count = 1u16;
    // Per (old class, inside the set): the new class, or u16::MAX when not yet numbered.
    let mut renumber = [u16::MAX; 512];
    for set in sets {
        let set = ByteSet(set);
        renumber[..2 * class_count as usize].fill(u16::MAX);
        let mut next = 0u16;
        for byte in 0..=255u8 {
            let key = 2 * class_of[byte as usize] as usize + set.contains(byte) as usize;
            if renumber[key] == u16::MAX {
                renumber[key] = next;
                next += 1;
            }
            class_of[byte as usize] = renumber[key];
        }
        class_count = next;
    }
    let mut representatives = vec![0u8; class_count as usize];
    let mut seen = vec![false; class_count as usize];
    let mut byte_class = [0u8; 256];
    for byte in 0..=255u8 {
        let class = class_of[byte as usize];
        // At most 256 classes exist, so a class id always fits a u8 after the renumbering.
        byte_class[byte as usize] = class as u8;
        if !seen[class as usize] {
            seen[class as usize] = true;
            representatives[class as usize] = byte;
        }
    }
    (byte_class, representatives)
}

/// Finds a cycle of rules that can call each other without reading a byte first, which would
/// expand forever. Returns the rules on the cycle, or `None`.
pub(crate) fn find_left_recursion(grammar: &Grammar) -> Option<Vec<usize>> {
    let rule_count = grammar.rules.len();
    let nullable = rules_satisfying(grammar, |symbol| matches!(symbol, Symbol::Whitespace));
    let symbol_nullable = |symbol: &Symbol, nullable: &[bool]| match symbol {
        Symbol::Bytes(_) => false,
        Symbol::Whitespace => true,
        Symbol::Rule(id) => nullable.get(id.index()).copied().unwrap_or(false),
    };
    // Edges: rule -> rules it can call before reading any byte; rule `r`'s are
    // `edges[edge_starts[r]..edge_starts[r + 1]]` (one allocation, not one per rule).
    let mut edges: Vec<usize> = Vec::new();
    let mut edge_starts: Vec<usize> = Vec::with_capacity(rule_count + 1);
    edge_starts.push(0);
    let mut called = Vec::new();
    for rule in &grammar.rules {
        called.clear();
        for alternative in &rule.alternatives {
            for symbol in alternative {
                if let Symbol::Rule(id) = symbol {
                    if id.index() < rule_count {
                        called.push(id.index());
                    }
                }
                if !symbol_nullable(symbol, &nullable) {
                    break;
                }
            }
        }
        called.sort_unstable();
        called.dedup();
        edges.extend_from_slice(&called);
        edge_starts.push(edges.len());
    }
    let successors = |rule: usize| edges.get(edge_starts[rule]..edge_starts[rule + 1]).unwrap_or_default();
    // Iterative depth-first search with colours; a grey successor closes a cycle.
    const WHITE: u8 = 0;
    const GREY: u8 = 1;
    const BLACK: u8 = 2;
    let mut colour = vec![WHITE; rule_count];
    let mut path: Vec<(usize, usize)> = Vec::new();
    for start in 0..rule_count {
        if colour[start] != WHITE {
            continue;
        }
        path.push((start, 0));
        colour[start] = GREY;
        while let Some(&mut (node, ref mut next_edge)) = path.last_mut() {
            if let Some(&successor) = successors(node).get(*next_edge) {
                *next_edge += 1;
                match colour[successor] {
                    WHITE => {
                        colour[successor] = GREY;
                        path.push((successor, 0));
                    }
                    GREY => {
                        let from = path.iter().position(|(n, _)| *n == successor).unwrap_or(0);
                        return Some(path[from..].iter().map(|(n, _)| *n).collect());
                    }
                    _ => {}
                }
            } else {
                colour[node] = BLACK;
                path.pop();
            }
        }
    }
    None
}
