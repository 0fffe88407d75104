//! [`TokenMask`]: the set of tokens allowed at one step, as a bitset over the vocabulary.
//!
//! Cost: vocabulary/8 bytes (6 KiB for 49k tokens); setting and testing a bit are O(1),
//! counting and iterating are linear in the vocabulary / 64.

/// Allowed tokens, one bit per token id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u64>,
    vocab_size: usize,
}

impl TokenMask {
    /// A mask over `vocab_size` tokens with none allowed.
    pub fn new(vocab_size: usize) -> Self {
        TokenMask {
            words: vec![0; vocab_size.div_ceil(64)],
            vocab_size,
        }
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    #[inline]
    pub fn set(&mut self, token: u32) {
        if let Some(word) = self.words.get_mut(token as usize / 64) {
            *word |= 1u64 << (token % 64);
        }
    }

    #[inline]
    pub fn unset(&mut self, token: u32) {
        if let Some(word) = self.words.get_mut(token as usize / 64) {
            *word &= !(1u64 << (token % 64));
        }
    }

    /// Sets every token of `tokens` (one pass over a local slice: the walk's hottest loop).
    #[inline]
    pub fn set_all(&mut self, tokens: &[u32]) {
        let words = &mut self.words[..];
        for &token in tokens {
            if let Some(word) = words.get_mut(token as usize / 64) {
                *word |= 1u64 << (token % 64);
            }
        }
    }

    /// Adds every token of `other` (a mask over the same vocabulary).
    pub fn union_with(&mut self, other: &TokenMask) {
        for (word, other) in self.words.iter_mut().zip(&other.words) {
            *word |= other;
        }
    }

    /// Makes this mask the tokens in both `a` and `b` (three masks over the same vocabulary).
    pub fn assign_intersection(&mut self, a: &TokenMask, b: &TokenMask) {
        for ((word, a), b) in self.words.iter_mut().zip(&a.words).zip(&b.words) {
            *word = a & b;
        }
    }

    #[inline]
    pub fn is_set(&self, token: u32) -> bool {
        self.words
            .get(token as usize / 64)
            .is_some_and(|w| w & (1u64 << (token % 64)) != 0)
    }

    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn iter_set(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(index, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros();
                rest &= rest - 1;
                Some(index as u32 * 64 + bit)
            })
        })
    }

    /// The raw words, lowest token first; for samplers that apply the mask in bulk.
    pub fn words(&self) -> &[u64] {
        &self.words
    }
}
