//! Lexicons end to end: `llamay_lexicon` on the OpenAI, Anthropic and Ollama routes of a real
//! daemon with a real model, `serve -lexicon` files (the banner's `lexicon=N`, the default for
//! requests that bring none, a list named by a request), the match modes (the default bans
//! `Parisis` with `Paris`), `run -deny`/`-lexicon` and `lexicon check`; and the 400s for bad
//! lexicons and misspelt `llamay_*` fields.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};

use llamay_test_support::daemon::Daemon;
use llamay_test_support::process::llamay_command;

const MODEL: &str = "smollm2:135m";
/// A prompt that steers the model toward the banned phrase "brown fox" (two tokens or more in
/// SmolLM2's vocabulary) and the word "lazy".
const STEERED: &str = "Repeat exactly: The quick brown fox jumps over the lazy dog.";
const SEEDS: [u32; 4] = [1, 2, 3, 4];

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/lexicons").join(name)
}

fn start(extra: &[&str]) -> Daemon {
    Daemon::builder()
        .model(MODEL)
        // The banner is logged at info.
        .env("RUST_LOG", "info")
        .args(["-c", "1024", "-parallel", "2", "-t", "1", "-max-loaded", "1", "-keepalive", "-1"])
        .args(extra)
        .start()
}

/// The output's words, lower-cased, with runs of separators as one space.
fn words(text: &str) -> String {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

fn has_word(text: &str, word: &str) -> bool {
    words(text).split(' ').any(|w| w == word)
}

/// Whether `text` holds "brown fox" or "lazy" as whole words, any case or spacing, as the
/// README defines a deny entry: words are runs of letters, digits and `_`, and the space in a
/// phrase matches a run of whitespace only (`brown-fox` is not the phrase).
fn banned_in(text: &str) -> bool {
    let lower = text.to_lowercase();
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    // Each word with the text that follows it up to the next word.
    let mut parts: Vec<(String, String)> = Vec::new();
    for c in lower.chars() {
        match parts.last_mut() {
            Some((word, gap)) if is_word(c) && gap.is_empty() => word.push(c),
            _ if is_word(c) => parts.push((c.to_string(), String::new())),
            Some((_, gap)) => gap.push(c),
            None => {}
        }
    }
    parts.iter().any(|(word, _)| word == "lazy")
        || parts.windows(2).any(|pair| {
            let ((first, gap), (second, _)) = (&pair[0], &pair[1]);
            first == "brown" && second == "fox" && gap.chars().all(char::is_whitespace)
        })
}

/// One request on `route` (`openai`, `anthropic`, `ollama`) with `extra` fields; the answer's
/// text, or the status and body when it is not 200.
fn ask(daemon: &Daemon, route: &str, prompt: &str, seed: u32, tokens: u32, extra: Value) -> Result<String, (u16, Value)> {
    let messages = json!([{"role": "user", "content": prompt}]);
    let (path, mut body) = match route {
        "openai" => ("/v1/chat/completions", json!({"model": MODEL, "messages": messages, "seed": seed, "max_tokens": tokens})),
        "anthropic" => ("/v1/messages", json!({"model": MODEL, "messages": messages, "max_tokens": tokens, "temperature": 0.8})),
        _ => (
            "/api/chat",
            json!({"model": MODEL, "messages": messages, "stream": false, "options": {"seed": seed, "num_predict": tokens}}),
        ),
    };
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    let (status, answer) = daemon.post(path, &body);
    if status != 200 {
        return Err((status, answer));
    }
    let text = match route {
        "openai" => answer["choices"][0]["message"]["content"].as_str(),
        "anthropic" => answer["content"][0]["text"].as_str(),
        _ => answer["message"]["content"].as_str(),
    };
    Ok(text.unwrap_or_default().to_string())
}

#[test]
fn a_banned_phrase_the_prompt_asks_for_never_appears_on_any_route() {
    let daemon = start(&[]);
    // Unconstrained and greedy, the model writes the phrase: the prompt does steer toward it.
    let free = ask(&daemon, "openai", STEERED, 0, 24, json!({"temperature": 0})).expect("answers");
    assert!(banned_in(&free), "the prompt should lead the model to the phrase: {free:?}");
    let deny = json!({"llamay_lexicon": {"deny": ["Brown  Fox", "lazy"]}});
    for route in ["openai", "anthropic", "ollama"] {
        for seed in SEEDS {
            let text = ask(&daemon, route, STEERED, seed, 24, deny.clone()).unwrap_or_else(|e| panic!("{route}: {e:?}"));
            assert!(!banned_in(&text), "{route} seed {seed} wrote a banned entry: {text:?}");
        }
        // Greedy too: the most likely continuation is the banned one.
        let text = ask(&daemon, route, STEERED, 0, 24, json!({"llamay_lexicon": {"deny": ["brown fox", "lazy"]}, "temperature": 0}))
            .unwrap_or_else(|e| panic!("{route}: {e:?}"));
        assert!(!banned_in(&text), "{route} greedy wrote a banned entry: {text:?}");
        assert!(!text.trim().is_empty(), "{route}: the model still answers");
    }
}

/// A prompt whose answer is "Paris" and its tower: the model glues letters to a whole-word ban
/// (`Parisis the capital`) rather than leave the word.
const FRANCE: &str = "What is the capital of France? Answer with the city name, then name its most famous tower";

/// Whether a word of `text` starts with `paris`, any case.
fn starts_paris(text: &str) -> bool {
    words(text).split(' ').any(|word| word.starts_with("paris"))
}

/// Whether `text` holds "eiffel tower", any case, any run of whitespace between the words.
fn has_eiffel_tower(text: &str) -> bool {
    text.to_lowercase().split_whitespace().collect::<Vec<_>>().join(" ").contains("eiffel tower")
}

#[test]
fn the_default_match_bans_every_word_a_reader_reads_as_the_banned_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("france.txt");
    std::fs::write(&file, "#!deny\nParis\nEiffel Tower\n").expect("writes");
    let daemon = start(&["-lexicon", file.to_str().unwrap_or("")]);
    // Without the list the model names the city: the prompt does steer toward it.
    let free = ask(&daemon, "openai", FRANCE, 0, 30, json!({"temperature": 0, "llamay_lexicon": {"deny": ["zebra"]}}))
        .expect("answers");
    eprintln!("free: {free:?}");
    assert!(starts_paris(&free), "the prompt should lead the model to the city: {free:?}");
    for route in ["openai", "anthropic", "ollama"] {
        for seed in SEEDS {
            let text = ask(&daemon, route, FRANCE, seed, 30, json!({"temperature": 0.8})).unwrap_or_else(|e| panic!("{route}: {e:?}"));
            eprintln!("default (prefix), {route} seed {seed}: {text:?}");
            assert!(!starts_paris(&text) && !has_eiffel_tower(&text), "{route} seed {seed}: {text:?}");
        }
    }
    // A request's list takes its own mode: `word` bans only the whole word, `substring` the
    // letters anywhere.
    for seed in [1, 2] {
        let list = |mode: &str| json!({"temperature": 0.8, "llamay_lexicon": {"deny": ["Paris", "Eiffel Tower"], "match": mode}});
        let whole = ask(&daemon, "openai", FRANCE, seed, 30, list("word")).expect("answers");
        eprintln!("word, seed {seed}: {whole:?}");
        assert!(!has_word(&whole, "paris"), "seed {seed}: {whole:?}");
        let anywhere = ask(&daemon, "openai", FRANCE, seed, 30, list("substring")).expect("answers");
        eprintln!("substring, seed {seed}: {anywhere:?}");
        assert!(!anywhere.to_lowercase().contains("paris") && !has_eiffel_tower(&anywhere), "seed {seed}: {anywhere:?}");
    }
    let (status, body) = ask(&daemon, "openai", FRANCE, 1, 4, json!({"llamay_lexicon": {"allow": ["yes"], "match": "prefix"}})).unwrap_err();
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("whole words only"), "{body}");
}

#[test]
fn a_budget_that_cuts_the_output_right_after_a_banned_word_does_not_leave_it_whole() {
    let daemon = start(&[]);
    let greedy = |tokens: u32, extra: Value| {
        let mut body = json!({"temperature": 0});
        if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
            body.extend(extra);
        }
        ask(&daemon, "openai", STEERED, 0, tokens, body).expect("answers")
    };
    // The budget at which the free answer's last word is `lazy`: cut there, nothing after the
    // word says it is whole, so only the cut can.
    let budget = (1..=24)
        .find(|&tokens| greedy(tokens, json!({})).trim_end().to_lowercase().ends_with("lazy"))
        .expect("the free answer reaches `lazy` within 24 tokens");
    for route in ["openai", "anthropic", "ollama"] {
        let text = ask(&daemon, route, STEERED, 0, budget, json!({"temperature": 0, "llamay_lexicon": {"deny": ["lazy"]}}))
            .unwrap_or_else(|e| panic!("{route}: {e:?}"));
        assert!(!has_word(&text, "lazy"), "{route}, {budget} tokens: {text:?}");
    }
}

#[test]
fn an_allow_list_leaves_only_its_words_on_every_route() {
    let daemon = start(&[]);
    let allow = json!({"llamay_lexicon": {"allow": ["yes", "no", "maybe"]}});
    for route in ["openai", "anthropic", "ollama"] {
        for seed in SEEDS {
            let text = ask(&daemon, route, "Is the sky blue? Explain in a sentence.", seed, 10, allow.clone())
                .unwrap_or_else(|e| panic!("{route}: {e:?}"));
            for word in words(&text).split(' ').filter(|w| !w.is_empty()) {
                assert!(["yes", "no", "maybe"].contains(&word), "{route} seed {seed}: {word:?} in {text:?}");
            }
        }
    }
}

#[test]
fn a_deny_list_applies_inside_a_schema_and_a_forced_tool_call_sets_it_aside() {
    let daemon = start(&[]);
    let schema = json!({"type": "object", "properties": {"animal": {"type": "string", "maxLength": 20}}, "required": ["animal"]});
    let format = json!({"type": "json_schema", "json_schema": {"name": "a", "schema": schema}});
    for seed in SEEDS {
        let text = ask(
            &daemon,
            "openai",
            "Which animal barks? Answer with the word dog.",
            seed,
            30,
            json!({"response_format": format, "llamay_lexicon": {"deny": ["dog", "dogs"]}}),
        )
        .expect("answers");
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
        assert!(value["animal"].is_string(), "{text}");
        assert!(!has_word(&text, "dog") && !has_word(&text, "dogs"), "seed {seed}: {text}");
    }
    // An enum whose only member is banned leaves the schema no output: refused, not ignored.
    let only_dog = json!({"type": "json_schema", "json_schema": {"name": "a", "schema": {"enum": ["dog"]}}});
    let (status, body) =
        ask(&daemon, "openai", "x", 1, 5, json!({"response_format": only_dog, "llamay_lexicon": {"deny": ["dog"]}})).unwrap_err();
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("llamay_lexicon")), "{body}");
    // The tool's argument is named `city`: under the lexicon it could not be written, yet the
    // forced call goes through, since a forced call sets the lexicon aside.
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}]);
    let (status, body) = daemon.post(
        "/v1/chat/completions",
        &json!({"model": MODEL, "max_tokens": 40, "temperature": 0, "tools": tools, "tool_choice": "required",
            "llamay_lexicon": {"deny": ["city", "weather"]},
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}),
    );
    assert_eq!(status, 200, "{body}");
    let call = &body["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{body}");
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap_or("")).expect("arguments are JSON");
    assert!(arguments["city"].is_string(), "{body}");
}

#[test]
fn bad_lexicons_and_misspelt_fields_are_400s_naming_what_is_wrong() {
    let daemon = start(&[]);
    let long = "x".repeat(2000);
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"llamay_lexicon": {"deny": []}}), "llamay_lexicon", "no entries"),
        (json!({"llamay_lexicon": {"deny": "bad"}}), "llamay_lexicon", "not a list"),
        (json!({"llamay_lexicon": {"ban": ["bad"]}}), "llamay_lexicon", "has the key"),
        (json!({"llamay_lexicon": {"deny": ["bad"], "match": "whole"}}), "llamay_lexicon", "unknown match mode"),
        (json!({"llamay_lexicon": {"deny": ["ok", "  "]}}), "llamay_lexicon", "entry 2"),
        (json!({"llamay_lexicon": {"deny": [long]}}), "llamay_lexicon", "limit of 1024"),
        (json!({"llamay_lexicon": {"allow": ["..."]}}), "llamay_lexicon", "no word"),
        (json!({"llamay_lexicon": "brands"}), "llamay_lexicon", "did not load"),
        (json!({"llamay_shcema": {"type": "string"}}), "llamay_shcema", "not a llamay field"),
    ];
    for route in ["openai", "anthropic", "ollama"] {
        for (extra, param, needle) in &cases {
            let (status, body) = ask(&daemon, route, "hi", 1, 4, extra.clone()).expect_err("refused");
            let message = body.to_string();
            assert_eq!(status, 400, "{route} {extra}: {body}");
            assert!(message.contains(param) && message.contains(needle), "{route} {extra}: {body}");
        }
        // Other unknown fields stay ignored.
        ask(&daemon, route, "hi", 1, 4, json!({"user": "u", "metadata": {"a": 1}})).unwrap_or_else(|e| panic!("{route}: {e:?}"));
    }
    assert!(daemon.log().find("panicked").is_none(), "{}", daemon.log());
}

/// The daemon's log without terminal colours.
fn plain_log(daemon: &Daemon) -> String {
    let log = daemon.log();
    let mut plain = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

#[test]
fn serve_lexicon_files_apply_to_requests_that_bring_none_and_the_banner_counts_them() {
    let banned = testdata("banned.txt");
    let other = tempfile::tempdir().expect("temp dir");
    let extra = other.path().join("extra.txt");
    std::fs::write(&extra, "#!deny\njumps\n").expect("writes");
    let daemon = start(&["-lexicon", banned.to_str().unwrap_or(""), "-lexicon", extra.to_str().unwrap_or("")]);
    assert!(plain_log(&daemon).contains("lexicon=2"), "{}", plain_log(&daemon));
    for route in ["openai", "anthropic", "ollama"] {
        for seed in SEEDS {
            let text = ask(&daemon, route, STEERED, seed, 24, json!({})).unwrap_or_else(|e| panic!("{route}: {e:?}"));
            assert!(!banned_in(&text) && !has_word(&text, "jumps"), "{route} seed {seed}: {text:?}");
        }
    }
    // A request's own list replaces the daemon's; one may name a daemon file.
    let own = ask(&daemon, "openai", STEERED, 0, 24, json!({"temperature": 0, "llamay_lexicon": {"deny": ["zebra"]}})).expect("answers");
    assert!(banned_in(&own), "the daemon's list no longer applies: {own:?}");
    let named = ask(&daemon, "openai", STEERED, 0, 24, json!({"temperature": 0, "llamay_lexicon": "extra"})).expect("answers");
    assert!(!has_word(&named, "jumps"), "{named:?}");
    // A daemon without lexicons says so.
    let plain = start(&[]);
    assert!(plain_log(&plain).contains("lexicon=0"), "{}", plain_log(&plain));
}

fn run(args: &[&str]) -> Output {
    llamay_command().args(args).output().expect("the binary runs")
}

#[test]
fn the_command_line_runs_under_a_lexicon_and_checks_texts() {
    let banned = testdata("banned.txt");
    let banned = banned.to_str().unwrap_or("");
    for seed in ["1", "2", "3"] {
        let output = run(&["run", "-m", MODEL, "-chat", "-t", "1", "-n", "24", "-seed", seed, "-deny", banned, "-p", STEERED, "-stats"]);
        let text = String::from_utf8_lossy(&output.stdout);
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{err}");
        assert!(!banned_in(&text), "seed {seed}: {text:?}");
        assert!(err.contains("lexicon"), "-stats reports the lexicon's mask cost: {err}");
    }
    let answers = testdata("answers.txt");
    let output = run(&["run", "-m", MODEL, "-chat", "-t", "1", "-n", "8", "-lexicon", answers.to_str().unwrap_or(""), "-p", "Is the sky blue?"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(words(&text).split(' ').filter(|w| !w.is_empty()).all(|w| ["yes", "no", "maybe"].contains(&w)), "{text:?}");

    let fails = run(&["lexicon", "check", banned, "The quick brown\n  FOX"]);
    let said = String::from_utf8_lossy(&fails.stdout);
    assert_eq!(fails.status.code(), Some(1), "{said}");
    assert!(said.contains("line 1, column 11") && said.contains("\"brown fox\""), "{said}");
    // The default match is prefix: `lazybones` starts with `lazy`; under `--match word` it is
    // another word.
    let prefix = run(&["lexicon", "check", banned, "brown foxes are not lazybones"]);
    let said = String::from_utf8_lossy(&prefix.stdout);
    assert_eq!(prefix.status.code(), Some(1), "{said}");
    assert!(said.contains("\"brown fox\", match prefix"), "{said}");
    let passes = run(&["lexicon", "check", "--match", "word", banned, "brown foxes are not lazybones"]);
    assert_eq!(passes.status.code(), Some(0), "{}", String::from_utf8_lossy(&passes.stdout));
    let missing = run(&["lexicon", "check", "/nonexistent/list.txt", "x"]);
    assert_eq!(missing.status.code(), Some(1));
}
