//! What a 10,000-word deny lexicon adds to the token masks of a request: mask time at every
//! token for a schema request without the list and with it (the issue's bar: within 2x), and
//! for a plain request with the list, on each benchmark vocabulary, with the ratio.
//!
//! Usage: `cargo bench --bench lexicon` (vocabularies as for maskbench: `LLAMAY_VOCAB_JSON=a[,b]`,
//! store model names or vocabulary files, default `smollm2:135m,gemma3:270m`).
//!
//! Text: the prose of the repository's README (code blocks and tables left out), cut into
//! passages; the schema documents put passages into free string fields. The deny list: the
//! vocabulary's first 10,000 distinct lowercase alphabetic word tokens (3 to 12 letters, by
//! token id) that neither the passages nor the schemas use, so every document stays writable
//! while the list shares prefixes with most of its words; the bench runs it as whole words
//! (`match word`), then as prefixes (`match prefix`, the default), there without the words that
//! start a word of the texts. Instances are tokenized greedily (longest match).
//! Each schema instance runs on a freshly compiled grammar, with and without the list; the
//! list is loaded once, as a daemon loads it, so its masks are shared across instances: the
//! texts run twice, first with the list's masks cold (its first mask is also printed apart),
//! then warm. Times are the bench thread's CPU time; one thread. "check" rows time the
//! sampler's first question (is the sampled token allowed).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use llamay::grammar::schema::{compile_schema_with_lexicon, FormatMode};
use llamay::grammar::{
    CompiledGrammar, Constraint, Lexicon, LexiconKind, LexiconLimits, LexiconMatcher, Limits, MatchMode, Matcher, Target, TokenTrie,
};
use serde_json::{json, Value};

use llamay_test_support::cpu_timing::{row, CpuInstant};

const DENY_WORDS: usize = 10_000;
const PASSAGE_WORDS: usize = 60;

/// The README's prose passages of about [`PASSAGE_WORDS`] words.
fn passages() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap_or_default();
    let mut words: Vec<&str> = Vec::new();
    let mut in_code = false;
    for line in readme.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || trimmed.starts_with('|') || trimmed.starts_with('#') || trimmed.starts_with("    ") {
            continue;
        }
        words.extend(line.split_whitespace());
    }
    words.chunks(PASSAGE_WORDS).filter(|chunk| chunk.len() > 10).map(|chunk| chunk.join(" ")).collect()
}

fn text_words(texts: &[String]) -> HashSet<String> {
    texts
        .iter()
        .flat_map(|text| text.split(|c: char| !c.is_alphanumeric() && c != '_'))
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The deny list for a vocabulary (see the module documentation).
fn deny_words(tokens: &[Vec<u8>], avoid: &HashSet<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut words = Vec::new();
    for token in tokens {
        let Ok(text) = std::str::from_utf8(token) else { continue };
        let word = text.trim_start_matches([' ', '\u{2581}']);
        if (3..=12).contains(&word.len())
            && word.bytes().all(|b| b.is_ascii_lowercase())
            && !avoid.contains(word)
            && seen.insert(word.to_string())
        {
            words.push(word.to_string());
            if words.len() == DENY_WORDS {
                break;
            }
        }
    }
    words
}

fn documents(passages: &[String]) -> Vec<(Value, Vec<String>)> {
    let article = json!({"type": "object", "properties": {
        "title": {"type": "string"},
        "summary": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "sections": {"type": "array", "items": {"type": "object", "properties": {
            "heading": {"type": "string"}, "body": {"type": "string"}}, "required": ["heading", "body"]}}},
        "required": ["title", "summary", "tags", "sections"]});
    let review = json!({"type": "object", "properties": {
        "rating": {"enum": ["good", "mixed", "poor"]},
        "comment": {"type": "string", "maxLength": 600},
        "quotes": {"type": "array", "items": {"type": "string"}, "maxItems": 4}},
        "required": ["rating", "comment"], "additionalProperties": false});
    let first_words = |text: &str, n: usize| text.split(' ').take(n).collect::<Vec<_>>().join(" ");
    let mut articles = Vec::new();
    let mut reviews = Vec::new();
    for (index, pair) in passages.chunks(2).enumerate() {
        let (a, b) = (&pair[0], pair.get(1).unwrap_or(&pair[0]));
        let tags: Vec<String> = a.split(' ').filter(|w| w.len() > 5).take(3).map(str::to_string).collect();
        articles.push(
            json!({"title": first_words(a, 6), "summary": a, "tags": tags,
                   "sections": [{"heading": first_words(b, 4), "body": b}]})
            .to_string(),
        );
        let rating = ["good", "mixed", "poor"][index % 3];
        reviews.push(json!({"rating": rating, "comment": a, "quotes": [first_words(b, 8)]}).to_string());
    }
    vec![(article, articles), (review, reviews)]
}

/// Greedy longest-match tokenization over the vocabulary's bytes.
struct Greedy {
    by_bytes: HashMap<Vec<u8>, u32>,
    longest: usize,
}

impl Greedy {
    fn new(tokens: &[Vec<u8>], eog: &[u32]) -> Self {
        let mut by_bytes = HashMap::new();
        for (id, bytes) in tokens.iter().enumerate() {
            if !bytes.is_empty() && !eog.contains(&(id as u32)) {
                by_bytes.entry(bytes.clone()).or_insert(id as u32);
            }
        }
        let longest = by_bytes.keys().map(Vec::len).max().unwrap_or(1).min(64);
        Greedy { by_bytes, longest }
    }

    fn tokenize(&self, text: &[u8]) -> Option<Vec<u32>> {
        let mut tokens = Vec::new();
        let mut at = 0;
        while at < text.len() {
            let found = (1..=self.longest.min(text.len() - at))
                .rev()
                .find_map(|len| self.by_bytes.get(&text[at..at + len]).map(|token| (token, len)))?;
            tokens.push(*found.0);
            at += found.1;
        }
        Some(tokens)
    }
}

/// Mask time at every token (and check time of every token) of `tokens` through `constraint`;
/// false if a token of the text was refused.
fn walk(constraint: &mut Constraint, tokens: &[u32], masks: &mut Vec<f64>, checks: &mut Vec<f64>) -> bool {
    for &token in tokens {
        let started = CpuInstant::now();
        let allowed = constraint.is_allowed(token);
        checks.push(started.elapsed_micros());
        let started = CpuInstant::now();
        let in_mask = constraint.compute_mask().is_set(token);
        masks.push(started.elapsed_micros());
        if !allowed || !in_mask || constraint.commit(token).is_err() {
            return false;
        }
    }
    true
}

fn main() {
    let passages = passages();
    let documents = documents(&passages);
    // Every word of the texts, and of the schemas' property names and values, stays writable.
    let mut written: Vec<String> = passages.clone();
    for (schema, instances) in &documents {
        written.push(schema.to_string());
        written.extend(instances.iter().cloned());
    }
    let avoid = text_words(&written);
    println!(
        "lexicon bench: {} README passages of ~{PASSAGE_WORDS} words; {} schemas, {} documents",
        passages.len(),
        documents.len(),
        documents.iter().map(|(_, docs)| docs.len()).sum::<usize>()
    );
    for path in llamay_test_support::vocabularies::names() {
        match llamay::actors::model::load_vocabulary(&path) {
            Ok(vocabulary) => bench_vocabulary(&path, vocabulary.pieces(), vocabulary.end_of_generation(), &passages, &avoid, &documents),
            Err(error) => eprintln!("{error}"),
        }
    }
}

fn bench_vocabulary(
    path: &str,
    tokens: &[Vec<u8>],
    eog: &[u32],
    passages: &[String],
    avoid: &HashSet<String>,
    documents: &[(Value, Vec<String>)],
) {
    let trie = Arc::new(TokenTrie::new(tokens, eog));
    let greedy = Greedy::new(tokens, eog);
    // As prefixes, the list's words must start none of the texts' words.
    let starts: HashSet<String> =
        avoid.iter().flat_map(|word| word.char_indices().map(move |(at, c)| word[..at + c.len_utf8()].to_string())).collect();
    for (mode, avoid) in [(MatchMode::Word, avoid), (MatchMode::Prefix, &starts)] {
        bench_list(path, tokens, mode, &deny_words(tokens, avoid), passages, documents, &trie, &greedy);
    }
}

/// One deny list matched as `mode`, over the texts on one vocabulary.
#[allow(clippy::too_many_arguments)]
fn bench_list(
    path: &str,
    tokens: &[Vec<u8>],
    mode: MatchMode,
    words: &[String],
    passages: &[String],
    documents: &[(Value, Vec<String>)],
    trie: &Arc<TokenTrie>,
    greedy: &Greedy,
) {
    let started = CpuInstant::now();
    let lexicon = match Lexicon::new(LexiconKind::Deny, Some(mode), words, &LexiconLimits::default()) {
        Ok(lexicon) => Arc::new(lexicon),
        Err(error) => {
            println!("vocabulary {path}: the deny list does not load: {error}");
            return;
        }
    };
    let build_micros = started.elapsed_micros();
    println!(
        "\nvocabulary {path}: {} tokens; deny list {} words ({} bytes, match {mode}), automaton {} states, {:.1} MiB, built in {:.1} ms",
        tokens.len(),
        lexicon.entry_count(),
        lexicon.entry_bytes(),
        lexicon.state_count(),
        lexicon.automaton_bytes() as f64 / (1 << 20) as f64,
        build_micros / 1e3
    );
    for target in [Target::Text, Target::Json] {
        let mut cold = LexiconMatcher::new(lexicon.clone(), trie.clone(), target).expect("a deny list runs at decode");
        let started = CpuInstant::now();
        cold.compute_mask();
        println!("  first mask of the list on this vocabulary ({target:?}, a walk of the whole trie): {:.2} ms", started.elapsed_micros() / 1e3);
    }
    // The first pass meets the list's masks for the first time (the masks of its roots after
    // other decoder states among them, whole walks); the second finds them cached on the list,
    // as a daemon does once it has served a few requests.
    for pass in ["list cold", "list warm"] {
        let mut times = Times::default();
        for (schema, instances) in documents {
            for instance in instances {
                match greedy.tokenize(instance.as_bytes()) {
                    Some(token_ids) => times.schema_instance(schema, &token_ids, &lexicon, trie),
                    None => times.untokenized += 1,
                }
            }
        }
        for passage in passages {
            let Some(token_ids) = greedy.tokenize(passage.as_bytes()) else {
                times.untokenized += 1;
                continue;
            };
            let mut plain =
                Constraint::new(None, LexiconMatcher::new(lexicon.clone(), trie.clone(), Target::Text)).expect("a lexicon");
            if !walk(&mut plain, &token_ids, &mut times.plain_masks, &mut times.plain_checks) {
                times.refused += 1;
            }
        }
        times.report(pass);
    }
}

/// Times of one pass over the texts, in microseconds.
#[derive(Default)]
struct Times {
    schema_masks: Vec<f64>,
    schema_checks: Vec<f64>,
    denied_masks: Vec<f64>,
    denied_checks: Vec<f64>,
    plain_masks: Vec<f64>,
    plain_checks: Vec<f64>,
    refused: usize,
    untokenized: usize,
}

impl Times {
    /// One document through a freshly compiled grammar, without the list and with it.
    fn schema_instance(&mut self, schema: &Value, token_ids: &[u32], lexicon: &Arc<Lexicon>, trie: &Arc<TokenTrie>) {
        let compile = |lexicon: Option<&Arc<Lexicon>>| -> Option<Arc<CompiledGrammar>> {
            let ir = match lexicon {
                Some(lexicon) => {
                    let ir = compile_schema_with_lexicon(schema, FormatMode::Ignore, lexicon).ok()?;
                    lexicon.restrict(ir, Target::Json).ok()?
                }
                None => llamay::grammar::schema::compile_schema(schema).ok()?,
            };
            CompiledGrammar::new(ir, &Limits::default()).ok().map(Arc::new)
        };
        let (Some(plain_grammar), Some(denied_grammar)) = (compile(None), compile(Some(lexicon))) else {
            self.refused += 1;
            return;
        };
        let mut alone = Constraint::new(Some(Matcher::new(plain_grammar, trie.clone())), None).expect("a grammar");
        let mut both = Constraint::new(
            Some(Matcher::new(denied_grammar, trie.clone())),
            LexiconMatcher::new(lexicon.clone(), trie.clone(), Target::Json),
        )
        .expect("a grammar");
        let (before_alone, before_both) = (self.schema_masks.len(), self.denied_masks.len());
        let ok = walk(&mut alone, token_ids, &mut self.schema_masks, &mut self.schema_checks)
            && walk(&mut both, token_ids, &mut self.denied_masks, &mut self.denied_checks);
        if !ok {
            self.refused += 1;
            self.schema_masks.truncate(before_alone);
            self.schema_checks.truncate(before_alone);
            self.denied_masks.truncate(before_both);
            self.denied_checks.truncate(before_both);
        }
    }

    fn report(mut self, pass: &str) {
        println!(
            "  {pass}: {} texts refused (must be 0), {} not tokenizable; a mask at every token:",
            self.refused, self.untokenized
        );
        let alone = row("schema", &mut self.schema_masks);
        let both = row("schema + deny 10k", &mut self.denied_masks);
        row("plain + deny 10k", &mut self.plain_masks);
        if let (Some(alone), Some(both)) = (alone, both) {
            println!(
                "  ratio schema+deny / schema: avg {:.2}x, p50 {:.2}x, p99 {:.2}x, max {:.2}x (goal: avg <= 2x)",
                both[0] / alone[0],
                both[1] / alone[1],
                both[2] / alone[2],
                both[3] / alone[3]
            );
        }
        println!("  the sampler's first question, is the sampled token allowed:");
        row("check, schema", &mut self.schema_checks);
        row("check, schema + deny 10k", &mut self.denied_checks);
        row("check, plain + deny 10k", &mut self.plain_checks);
    }
}
