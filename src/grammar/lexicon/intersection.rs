//! [`Intersection`]: a grammar's mask and a lexicon's intersected into one buffer, and kept up
//! to date token by token while the grammar's mask stays the same one (inside a string it does
//! for every token). A lexicon mask is mostly a root's mask with a few tokens given otherwise
//! ([`LexMask::Delta`]), so from one step to the next only those tokens change, and, when the
//! root changes (a word began or ended), the tokens on which the two roots differ.
//!
//! Cost: a full intersection is one pass over vocabulary/64 words (about a microsecond at 262k
//! tokens); an update is a bit per changed token.

use std::sync::Arc;

use crate::mask::TokenMask;

/// A lexicon's mask at one position.
pub(crate) enum LexMask {
    /// Every token's bit.
    Whole(Arc<TokenMask>),
    /// The mask of a root (named by `root_key`), but for the tokens of `overrides`.
    Delta { root_key: u64, root: Arc<TokenMask>, overrides: Vec<(u32, bool)> },
}

impl LexMask {
    /// Memory this mask holds of its own (a root's mask is shared).
    pub(crate) fn own_bytes(&self) -> usize {
        match self {
            LexMask::Whole(mask) => mask.words().len() * 8,
            LexMask::Delta { overrides, .. } => overrides.len() * 8,
        }
    }

    /// The mask itself, built when it is a delta.
    #[cfg(test)]
    pub(crate) fn to_mask(&self) -> TokenMask {
        match self {
            LexMask::Whole(mask) => (**mask).clone(),
            LexMask::Delta { root, overrides, .. } => {
                let mut mask = (**root).clone();
                for &(token, allowed) in overrides {
                    assign(&mut mask, token, allowed);
                }
                mask
            }
        }
    }
}

fn assign(mask: &mut TokenMask, token: u32, allowed: bool) {
    if allowed {
        mask.set(token);
    } else {
        mask.unset(token);
    }
}

/// `grammar ∧ lexicon` for the last masks given, and those masks.
#[derive(Default)]
pub(crate) struct Intersection {
    mask: Option<TokenMask>,
    grammar: Option<Arc<TokenMask>>,
    lexicon: Option<Arc<LexMask>>,
}

impl Intersection {
    /// The tokens both `grammar` (every token when `None`) and `lexicon` allow.
    /// `root_difference(a, b)` gives the tokens on which two roots' masks differ, when they are
    /// few enough to update one by one.
    pub(crate) fn update(
        &mut self,
        grammar: Option<Arc<TokenMask>>,
        lexicon: Arc<LexMask>,
        root_difference: impl FnOnce(u64, u64) -> Option<Arc<[u32]>>,
    ) -> &TokenMask {
        let previous = self.lexicon.take();
        let same_grammar = self.mask.is_some()
            && match (&self.grammar, &grammar) {
                (None, None) => true,
                (Some(before), Some(now)) => Arc::ptr_eq(before, now),
                _ => false,
            };
        let grammar_allows = |token: u32| grammar.as_ref().is_none_or(|mask| mask.is_set(token));
        let updated = match (same_grammar, previous.as_deref(), &*lexicon, self.mask.as_mut()) {
            (
                true,
                Some(LexMask::Delta { root_key: before, overrides: undone, .. }),
                LexMask::Delta { root_key, root, overrides },
                Some(mask),
            ) => {
                let roots = if before == root_key { Some(None) } else { root_difference(*before, *root_key).map(Some) };
                match roots {
                    Some(changed) => {
                        let back_to_root = undone.iter().map(|(token, _)| token).chain(changed.iter().flat_map(|c| c.iter()));
                        for &token in back_to_root {
                            assign(mask, token, grammar_allows(token) && root.is_set(token));
                        }
                        for &(token, allowed) in overrides {
                            assign(mask, token, grammar_allows(token) && allowed);
                        }
                        true
                    }
                    None => false,
                }
            }
            _ => false,
        };
        if !updated {
            let (base, overrides) = match &*lexicon {
                LexMask::Whole(mask) => (mask, &[][..]),
                LexMask::Delta { root, overrides, .. } => (root, &overrides[..]),
            };
            let mask = self.mask.get_or_insert_with(|| TokenMask::new(base.vocab_size()));
            match &grammar {
                Some(grammar) => mask.assign_intersection(grammar, base),
                None => mask.clone_from(base),
            }
            for &(token, allowed) in overrides {
                assign(mask, token, grammar_allows(token) && allowed);
            }
        }
        self.grammar = grammar;
        self.lexicon = Some(lexicon);
        self.mask.get_or_insert_with(|| TokenMask::new(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask_of(size: usize, tokens: &[u32]) -> Arc<TokenMask> {
        let mut mask = TokenMask::new(size);
        for &token in tokens {
            mask.set(token);
        }
        Arc::new(mask)
    }

    #[test]
    fn updates_token_by_token_equal_a_full_intersection() {
        let grammar = mask_of(200, &(0..150).collect::<Vec<_>>());
        let root_a = mask_of(200, &(0..200).filter(|t| t % 3 != 0).collect::<Vec<_>>());
        let root_b = mask_of(200, &(0..200).filter(|t| t % 5 != 0).collect::<Vec<_>>());
        let difference: Arc<[u32]> = (0..200).filter(|&t| root_a.is_set(t) != root_b.is_set(t)).collect();
        let steps = [
            LexMask::Delta { root_key: 1, root: root_a.clone(), overrides: vec![(3, true), (4, false)] },
            LexMask::Delta { root_key: 1, root: root_a.clone(), overrides: vec![(7, false), (160, true)] },
            LexMask::Delta { root_key: 2, root: root_b.clone(), overrides: vec![(10, true)] },
            LexMask::Whole(root_a.clone()),
            LexMask::Delta { root_key: 2, root: root_b.clone(), overrides: vec![] },
        ];
        let mut intersection = Intersection::default();
        let mut updated_in_place = 0;
        for step in steps {
            let expected = {
                let mut expected = step.to_mask();
                let lexicon = expected.clone();
                expected.assign_intersection(&grammar, &lexicon);
                expected
            };
            let step = Arc::new(step);
            let mut asked = false;
            let got = intersection
                .update(Some(grammar.clone()), step, |_, _| {
                    asked = true;
                    Some(difference.clone())
                })
                .clone();
            updated_in_place += usize::from(asked);
            assert_eq!(got, expected);
        }
        assert_eq!(updated_in_place, 1, "the change of root was applied token by token");
    }
}
