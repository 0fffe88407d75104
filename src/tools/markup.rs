//! The model's call markup (`<tool_call>`, `</tool_call>`) kept out of what a client reads:
//! [`strip_markup`] for text finished at once, [`MarkupFilter`] for text that streams in
//! pieces (a request whose history has calls but that offers no tools, so its answer is not
//! held). Removing a tag can join the text around it into a new tag, so both remove tags the
//! way a stack reduces: a tag is removed as soon as the text so far ends with one.
//!
//! Cost: linear in the text; the filter holds back at most the run of tag characters at the
//! end of what it has seen.

pub const OPEN_TAG: &str = "<tool_call>";
pub const CLOSE_TAG: &str = "</tool_call>";

/// The characters a tag is written with, but its closing `>`: a run of them after a `<` may
/// still become a tag; anything else never can.
const TAG_CHARACTERS: &str = "</tol_ca";

/// `text` with every call tag removed, including tags formed by removing others.
pub fn strip_markup(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        out.push(c);
        remove_tag_at_end(&mut out);
    }
    out
}

/// At most one tag can end where the last character was pushed: one ending earlier would
/// already have been removed.
fn remove_tag_at_end(text: &mut String) {
    if !text.ends_with('>') {
        return;
    }
    for tag in [OPEN_TAG, CLOSE_TAG] {
        if text.ends_with(tag) {
            text.truncate(text.len() - tag.len());
            return;
        }
    }
}

/// Removes call tags from text that arrives in pieces; the concatenation of what it returns
/// is [`strip_markup`] of the whole text.
#[derive(Debug, Default)]
pub struct MarkupFilter {
    pending: String,
}

impl MarkupFilter {
    /// The part of the text so far that no later piece can turn into markup.
    pub fn push(&mut self, piece: &str) -> String {
        for c in piece.chars() {
            self.pending.push(c);
            remove_tag_at_end(&mut self.pending);
        }
        let keep = self.pending.split_off(may_become_markup(&self.pending));
        std::mem::replace(&mut self.pending, keep)
    }

    /// What was held back, at the end of the answer.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// Where the tail that a later piece could still complete into a tag begins: the first `<`
/// of the trailing run of tag characters (`text.len()` when there is none).
fn may_become_markup(text: &str) -> usize {
    let run_start = text
        .char_indices()
        .rev()
        .take_while(|(_, c)| TAG_CHARACTERS.contains(*c))
        .last()
        .map_or(text.len(), |(index, _)| index);
    text[run_start..]
        .find('<')
        .map_or(text.len(), |offset| run_start + offset)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_markup_filter_drops_tags_split_across_pieces() {
        let mut filter = MarkupFilter::default();
        let pieces = [
            "Hi <tool",
            "_call>\n{\"a\": 1}\n</",
            "tool_call> done <b",
            "> x <",
        ];
        let mut out: String = pieces.iter().map(|piece| filter.push(piece)).collect();
        out.push_str(&filter.finish());
        assert_eq!(out, "Hi \n{\"a\": 1}\n done <b> x <");
        let mut nested = MarkupFilter::default();
        let mut out = nested.push("<tool<tool_call>_call>x");
        out.push_str(&nested.finish());
        assert_eq!(out, "x");
    }

    proptest! {
        #[test]
        fn the_filter_streams_what_the_whole_text_would_give(text in "(<tool_call>|</tool_call>|<|[a-z_/ >]){0,40}", cuts in prop::collection::vec(0usize..40, 0..6)) {
            let mut filter = MarkupFilter::default();
            let mut out = String::new();
            let mut start = 0;
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(text.len())).collect();
            cuts.sort_unstable();
            for cut in cuts {
                out.push_str(&filter.push(&text[start..cut]));
                start = cut;
            }
            out.push_str(&filter.push(&text[start..]));
            out.push_str(&filter.finish());
            prop_assert_eq!(out, strip_markup(&text));
        }
    }
}
