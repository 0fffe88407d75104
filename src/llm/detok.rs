//! Incremental detokenization: token bytes in, complete UTF-8 text out.
//!
//! Tokens split multi-byte characters (a byte-level BPE token can end halfway through an emoji),
//! so [`Utf8Stream`] holds back an incomplete trailing sequence until the bytes that finish it
//! arrive. Bytes that can never become valid UTF-8 are emitted as U+FFFD; a character still
//! unfinished when the generation ends is dropped.
//! Cost: O(bytes) per push, at most 3 bytes held back.

/// Turns a stream of byte chunks into text without ever splitting a character.
#[derive(Debug, Default, Clone)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `bytes` and returns whatever text is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(text) => {
                    out.push_str(text);
                    self.pending.clear();
                    return out;
                }
                Err(error) => {
                    let valid = error.valid_up_to();
                    // The prefix was just checked to be valid UTF-8.
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match error.error_len() {
                        // Incomplete sequence at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Ends the stream. Only the start of a character can be held back (`push` emits or
    /// replaces everything else), and a character the generation never finished is dropped:
    /// a replacement character would be text no constraint allowed.
    pub fn finish(&mut self) -> String {
        self.pending.clear();
        String::new()
    }

    /// Bytes held back waiting for the rest of a character.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_inside_a_four_byte_character_are_held_back() {
        let crab = "🦀".as_bytes();
        let mut stream = Utf8Stream::new();
        assert_eq!(stream.push(b"a"), "a");
        assert_eq!(stream.push(&crab[..1]), "");
        assert_eq!(stream.push(&crab[1..3]), "");
        assert_eq!(stream.pending_len(), 3);
        assert_eq!(stream.push(&[crab[3], b'b']), "🦀b");
        assert_eq!(stream.finish(), "");
    }

    #[test]
    fn every_split_of_mixed_text_reassembles_exactly() {
        let text = "née · 東京 🦀 ok";
        let bytes = text.as_bytes();
        for cut_a in 0..bytes.len() {
            for cut_b in cut_a..bytes.len() {
                let mut stream = Utf8Stream::new();
                let mut out = stream.push(&bytes[..cut_a]);
                out += &stream.push(&bytes[cut_a..cut_b]);
                out += &stream.push(&bytes[cut_b..]);
                out += &stream.finish();
                assert_eq!(out, text, "cuts at {cut_a} and {cut_b}");
            }
        }
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut stream = Utf8Stream::new();
        assert_eq!(stream.push(&[b'x', 0xFF, b'y']), "x\u{FFFD}y");
        assert_eq!(stream.push(&[0xE6, 0x9D]), "");
        assert_eq!(stream.finish(), "", "an unfinished character is dropped, not replaced");
    }
}
