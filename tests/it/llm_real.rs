//! The llm layer against the real models: chat templates as each model renders them, and
//! detokenization that never splits a character even when tokens do.

use llamay::llm::detok::Utf8Stream;
use llamay::llm::template::TemplateMessage;
use llamay::llm::Model;
use llamay::store::{ModelName, Store};

fn load(name: &str) -> Model {
    let store = Store::open(&Store::default_home()).expect("store");
    let manifest = store.resolve(&ModelName::parse(name).unwrap()).expect("model imported by scripts/setup");
    Model::load(&store.blob_path(&manifest)).expect("model loads")
}

fn conversation() -> Vec<TemplateMessage> {
    vec![TemplateMessage::new("system", "Answer in one word."), TemplateMessage::new("user", "Capital of Italy?")]
}

#[test]
fn smollm2_renders_its_own_chatml_template() {
    let model = load("smollm2:135m");
    assert_eq!(model.chat_template().kind(), "gguf");
    let text = model.render_chat(&conversation(), None).unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nAnswer in one word.<|im_end|>\n<|im_start|>user\nCapital of Italy?<|im_end|>\n<|im_start|>assistant\n"
    );
    // The markers are single control tokens, not text.
    let tokens = model.tokenize_chat(&conversation(), None).unwrap();
    assert_eq!(tokens[0], 1, "<|im_start|> is token 1 in SmolLM2");
    assert!(tokens.len() < 30, "{} tokens: markers were split into text", tokens.len());
}

#[test]
fn gemma_without_a_template_uses_gemma_turns_with_one_bos() {
    let model = load("gemma3:270m");
    assert_eq!(model.chat_template().kind(), "gemma");
    let text = model.render_chat(&conversation(), None).unwrap();
    assert_eq!(
        text,
        "<start_of_turn>user\nAnswer in one word.\n\nCapital of Italy?<end_of_turn>\n<start_of_turn>model\n"
    );
    let tokens = model.tokenize_chat(&conversation(), None).unwrap();
    let bos = model.vocabulary().bos().expect("gemma has a BOS token");
    assert_eq!(tokens[0], bos);
    assert_eq!(tokens.iter().filter(|t| **t == bos).count(), 1);
}

#[test]
fn detokenizing_token_by_token_reassembles_multibyte_text_exactly() {
    let text = "Zürich → 東京 🦀 naïve café ☕";
    for name in ["smollm2:135m", "gemma3:270m"] {
        let model = load(name);
        let tokens = model.tokenize(text, false, false).unwrap();
        let vocabulary = model.vocabulary();
        let split_inside_a_character =
            tokens.iter().any(|t| std::str::from_utf8(vocabulary.piece(*t)).is_err());
        let mut stream = Utf8Stream::new();
        let mut out = String::new();
        for token in &tokens {
            let piece = stream.push(vocabulary.piece(*token));
            assert!(!piece.contains('\u{FFFD}'), "{name}: a replacement character mid-stream");
            out.push_str(&piece);
        }
        out.push_str(&stream.finish());
        // SentencePiece writes the leading space marker as a space.
        assert_eq!(out.trim_start(), text, "{name}");
        if name == "smollm2:135m" {
            assert!(split_inside_a_character, "byte-level BPE should split some character across tokens");
        }
    }
}

/// `Context::exact_rows` on the real models: the batch it reports exact gives each row the
/// logits its token gets when decoded alone, and the measurement leaves sequence 0 empty for
/// the requests that follow.
#[test]
fn exact_rows_names_a_batch_whose_rows_decode_as_they_do_alone() {
    use llamay::llm::{BatchEntry, ContextParams};
    for name in ["smollm2:135m", "gemma3:270m"] {
        let model = load(name);
        let mut context = model.new_context(&ContextParams { n_ctx: 512, batch: 64, ..ContextParams::default() }).unwrap();
        let tokens = model.tokenize("{\"order\": \"A-1043\", \"city\": \"Lyon\", \"total\": 129.5, \"items\": 3}", true, false).unwrap();
        let rows = context.exact_rows(&tokens, 9).unwrap();
        assert!((1..=9).contains(&rows), "{name}: {rows}");
        let seq = context.seq(0).unwrap();
        // Left empty: the prefix decodes from position 0.
        context.decode(&[BatchEntry { seq, tokens: &tokens[..4], first_pos: 0, logits: 0 }]).unwrap();
        let decoded = context.decode(&[BatchEntry { seq, tokens: &tokens[4..4 + rows], first_pos: 4, logits: rows }]).unwrap();
        let batched: Vec<Vec<f32>> = decoded[0].iter().map(|row| context.logits(*row).unwrap().to_vec()).collect();
        assert!(context.truncate(seq, 4));
        let alone: Vec<Vec<f32>> = (0..rows)
            .map(|at| {
                let decoded = context
                    .decode(&[BatchEntry { seq, tokens: &tokens[4 + at..5 + at], first_pos: 4 + at as u32, logits: 1 }])
                    .unwrap();
                context.logits(decoded[0][0]).unwrap().to_vec()
            })
            .collect();
        assert!(batched == alone, "{name}: a batch of {rows} rows was reported exact but its logits differ");
        eprintln!("{name}: batches of up to {rows} rows decode as one-row decodes do");
    }
}
