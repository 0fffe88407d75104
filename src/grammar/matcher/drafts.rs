//! Drafts: what a decoder may propose for the model to verify in one batch. The bytes the
//! grammar leaves no choice about from the current state ([`Matcher::forced_bytes`]), so a span
//! such as `": "` after a closed object's key costs no decode step of its own.
//!
//! A byte is forced when it is the only byte the state can read and the state is not complete
//! (ending the output is the other choice); where whitespace may come first, the output's own
//! habit decides (a guess: the model verifies it). Cost: one grammar step per forced byte, uncached
//! (spans are short and each is read once).

use super::*;
use crate::automaton::whitespace_set;

impl Matcher {
    /// The bytes the grammar forces from here, at most `max`, cut to whole UTF-8 characters;
    /// empty when the committed text ends inside a character. Where the grammar allows
    /// whitespace before its one next byte, `habit(last, next)` says what whitespace the output
    /// has written between those bytes before (`Some(b"")` for none): the walk takes that and
    /// goes on, or stops there when the output has no habit yet.
    pub fn forced_bytes(&self, max: usize, last: Option<u8>, habit: &dyn Fn(u8, u8) -> Option<Vec<u8>>) -> Vec<u8> {
        let mut forced = Vec::new();
        if self.pending_continuations > 0 {
            return forced;
        }
        let whitespace = whitespace_set();
        let mut config = self.config.to_vec();
        'walk: while forced.len() < max {
            let reading = self.grammar.reading(&config);
            if reading.accepting {
                break;
            }
            let solid = reading.readable.minus(&whitespace);
            let next = match (solid.len(), reading.readable.len()) {
                (1, 1) => solid.iter().collect::<Vec<u8>>(),
                (1, _) => {
                    let Some(previous) = forced.last().copied().or(last) else { break };
                    let Some(next) = solid.iter().next() else { break };
                    let Some(mut run) = habit(previous, next) else { break };
                    run.push(next);
                    run
                }
                _ => break,
            };
            for byte in next {
                match self.grammar.step(&config, byte) {
                    Ok(next) if !next.is_empty() => config = next,
                    _ => break 'walk,
                }
                forced.push(byte);
            }
        }
        forced.truncate(max);
        let whole = match std::str::from_utf8(&forced) {
            Ok(_) => forced.len(),
            Err(error) => error.valid_up_to(),
        };
        forced.truncate(whole);
        forced
    }
}
