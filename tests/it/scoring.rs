//! Scoring for evaluation (issue 59) against the real daemon and smollm2:135m: the tokenizer
//! routes, prompt log-probabilities (`/v1/completions` with echo) checked against logits the
//! test computes itself through the llm layer (one batch with logits at every position, not
//! the route under test), and chat log-probabilities (greedy tokens are their own top-1, the
//! alternatives are sorted, streaming gives what the whole answer gives).

use llamay::llm::{BatchEntry, ContextParams, Model};
use llamay::store::{ModelName, Store};
use llamay_test_support::daemon::Daemon;
use serde_json::{json, Value};

const MODEL: &str = "smollm2:135m";

fn daemon() -> Daemon {
    Daemon::builder().model(MODEL).start()
}

fn load(name: &str) -> Model {
    let store = Store::open(&Store::default_home()).expect("store");
    let manifest = store.resolve(&ModelName::parse(name).unwrap()).expect("model imported by scripts/setup");
    Model::load(&store.blob_path(&manifest)).expect("model loads")
}

/// Each token's log-probability after the tokens before it (`None` for the first), from one
/// decode of the whole sequence with logits at every position, log-softmax in f64.
fn reference_logprobs(model: &Model, tokens: &[u32]) -> Vec<Option<f64>> {
    let mut context = model
        .new_context(&ContextParams { n_ctx: 1024, batch: 512, ..ContextParams::default() })
        .expect("a context");
    let seq = context.seq(0).unwrap();
    let rows = context
        .decode_scoring(&[BatchEntry { seq, tokens, first_pos: 0, logits: 0 }], &[0])
        .expect("decode");
    let mut logprobs = vec![None];
    for (k, row) in rows[0].iter().enumerate().take(tokens.len() - 1) {
        let logits = context.logits(*row).expect("logits");
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let total: f64 = logits.iter().map(|l| (*l as f64 - max).exp()).sum();
        logprobs.push(Some(logits[tokens[k + 1] as usize] as f64 - max - total.ln()));
    }
    logprobs
}

/// The `data:` objects of an SSE body, without `[DONE]`.
fn sse_objects(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).expect("a JSON chunk"))
        .collect()
}

fn post_stream(daemon: &Daemon, path: &str, body: &Value) -> Vec<Value> {
    let response = daemon.client().post(daemon.url(path)).json(body).send().expect("the daemon answers");
    assert_eq!(response.status().as_u16(), 200);
    sse_objects(&response.text().expect("a body"))
}

#[test]
fn tokenize_round_trips_through_detokenize_and_names_unknown_ids() {
    let daemon = daemon();
    let text = "Scoring: Zürich → 東京, 42 times.";
    let (status, tokenized) = daemon.post("/tokenize", &json!({"model": MODEL, "prompt": text, "add_special_tokens": false}));
    assert_eq!(status, 200, "{tokenized}");
    let tokens = tokenized["tokens"].as_array().expect("tokens").clone();
    assert_eq!(tokenized["count"], json!(tokens.len()));
    assert!(tokenized["max_model_len"].as_u64().unwrap() >= 512, "{tokenized}");
    let (status, detokenized) = daemon.post("/detokenize", &json!({"model": MODEL, "tokens": tokens}));
    assert_eq!(status, 200, "{detokenized}");
    assert_eq!(detokenized["prompt"], json!(text));
    // The same ids as the model's own tokenizer gives, and the default model answers too.
    let model = load(MODEL);
    let expected = model.tokenize(text, false, false).unwrap();
    assert_eq!(tokenized["tokens"], json!(expected));
    let (status, by_default) = daemon.post("/tokenize", &json!({"prompt": text, "add_special_tokens": false}));
    assert_eq!((status, &by_default["tokens"]), (200, &tokenized["tokens"]));
    // A conversation is rendered through the chat template.
    let (status, chat) = daemon.post("/tokenize", &json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}));
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["tokens"][0], json!(1), "<|im_start|> opens SmolLM2's template: {chat}");
    let (status, info) = daemon.get("/tokenizer_info");
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["eos_token"], json!("<|im_end|>"), "{info}");
    assert!(info["chat_template"].as_str().unwrap().contains("im_start"), "{info}");
    assert_eq!(info["model_max_length"], tokenized["max_model_len"]);
    // A client finds the end-of-sequence id by tokenizing its text (lm-evaluation-harness does).
    let (status, eos) = daemon.post("/tokenize", &json!({"prompt": info["eos_token"], "add_special_tokens": false}));
    assert_eq!((status, eos["count"].as_u64()), (200, Some(1)), "{eos}");
    assert!(model.vocabulary().is_end_of_generation(eos["tokens"][0].as_u64().unwrap() as u32), "{eos}");
    let (status, refused) = daemon.post("/detokenize", &json!({"model": MODEL, "tokens": [1, 99999999]}));
    assert_eq!(status, 400, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("tokens[1]") && message.contains("99999999"), "{message}");
}

#[test]
fn echo_logprobs_of_token_ids_match_a_direct_decode_of_every_position() {
    let daemon = daemon();
    let model = load(MODEL);
    let question = "Question: Which planet is known as the red planet?\nAnswer:";
    let choices = [" Mars", " Venus", " Jupiter", " Saturn"];
    let mut worst: f64 = 0.0;
    let mut scored_tokens = 0;
    let mut prompts = Vec::new();
    for choice in choices {
        let tokens = model.tokenize(&format!("{question}{choice}"), false, false).unwrap();
        prompts.push(tokens);
    }
    // The four choices share the question: sent one by one, each after the first reuses the
    // question's scored rows and decodes its own continuation.
    let mut cached_after_first = 0;
    for (index, tokens) in prompts.iter().enumerate() {
        let body = json!({"model": MODEL, "prompt": tokens, "echo": true, "logprobs": 3, "max_tokens": 0, "temperature": 0});
        let (status, answer) = daemon.post("/v1/completions", &body);
        assert_eq!(status, 200, "{answer}");
        let logprobs = &answer["choices"][0]["logprobs"];
        let got: Vec<Option<f64>> = logprobs["token_logprobs"].as_array().unwrap().iter().map(Value::as_f64).collect();
        assert_eq!(got.len(), tokens.len(), "one log-probability per prompt token: {answer}");
        assert_eq!(got[0], None, "the first prompt token has none");
        let reference = reference_logprobs(&model, tokens);
        for (position, (got, want)) in got.iter().zip(&reference).enumerate().skip(1) {
            let difference = (got.unwrap() - want.unwrap()).abs();
            assert!(difference <= 0.05, "{}: position {position}: {got:?} against {want:?}", choices[index]);
            worst = worst.max(difference);
            scored_tokens += 1;
        }
        // Top alternatives: three per position, sorted, the most likely at least as likely as
        // the token itself.
        for (position, top) in logprobs["top_logprobs"].as_array().unwrap().iter().enumerate().skip(1) {
            let values: Vec<f64> = top.as_object().unwrap().values().map(|v| v.as_f64().unwrap()).collect();
            assert!(!values.is_empty() && values.len() <= 3, "{top}");
            assert!(values.iter().cloned().fold(f64::NEG_INFINITY, f64::max) >= got[position].unwrap() - 1e-6);
        }
        assert_eq!(answer["choices"][0]["text"].as_str().unwrap(), format!("{question}{}", choices[index]));
        if index > 0 {
            cached_after_first += answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
        }
    }
    eprintln!(
        "echo logprobs over {scored_tokens} prompt tokens: worst per-token difference from a direct decode {worst:.3e} nats; \
         {cached_after_first} prompt tokens of choices 2-4 reused from the first's scored prefix"
    );
    assert!(cached_after_first > 0, "the shared question was decoded again for every choice");
}

#[test]
fn greedy_chat_tokens_are_their_own_top_1_sorted_and_streamed_alike() {
    let daemon = daemon();
    let body = json!({
        "model": MODEL, "temperature": 0, "max_tokens": 12, "logprobs": true, "top_logprobs": 5,
        "messages": [{"role": "user", "content": "Name three colours."}],
    });
    let (status, answer) = daemon.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{answer}");
    let content = answer["choices"][0]["logprobs"]["content"].as_array().expect("logprobs.content").clone();
    assert!(!content.is_empty(), "{answer}");
    let text: String = content.iter().map(|t| t["token"].as_str().unwrap()).collect();
    assert_eq!(text, answer["choices"][0]["message"]["content"].as_str().unwrap());
    for token in &content {
        let top = token["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 5, "{token}");
        assert_eq!(top[0]["token"], token["token"], "a greedy token is its own top-1: {token}");
        assert_eq!(top[0]["logprob"], token["logprob"]);
        let values: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(values.windows(2).all(|w| w[0] >= w[1]), "sorted: {values:?}");
        assert!(token["logprob"].as_f64().unwrap() <= 0.0);
        let bytes: Vec<u8> = serde_json::from_value(token["bytes"].clone()).unwrap();
        assert_eq!(String::from_utf8_lossy(&bytes), token["token"].as_str().unwrap());
    }
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let streamed: Vec<Value> = post_stream(&daemon, "/v1/chat/completions", &streaming)
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["logprobs"]["content"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(streamed, content, "streamed log-probabilities differ from the whole answer's");
    // Ollama's shape carries the same numbers.
    let ollama = json!({
        "model": MODEL, "stream": false, "logprobs": true, "top_logprobs": 5,
        "options": {"temperature": 0, "num_predict": 12},
        "messages": [{"role": "user", "content": "Name three colours."}],
    });
    let (status, answer) = daemon.post("/api/chat", &ollama);
    assert_eq!(status, 200, "{answer}");
    let first = &answer["logprobs"][0];
    assert_eq!(first["token"], content[0]["token"], "{answer}");
    assert_eq!(first["top_logprobs"].as_array().unwrap().len(), 5);
    // Out of range, and on a route whose API has none: refused by name.
    let mut too_many = body.clone();
    too_many["top_logprobs"] = json!(21);
    let (status, refused) = daemon.post("/v1/chat/completions", &too_many);
    assert_eq!((status, refused["error"]["param"].as_str()), (400, Some("top_logprobs")), "{refused}");
    let anthropic = json!({"model": MODEL, "max_tokens": 4, "logprobs": true, "messages": [{"role": "user", "content": "Hi"}]});
    let (status, refused) = daemon.post("/v1/messages", &anthropic);
    assert_eq!(status, 400, "{refused}");
}

#[test]
fn completions_stream_the_same_choices_and_logprobs_as_whole_answers() {
    let daemon = daemon();
    let body = json!({
        "model": MODEL, "prompt": ["The capital of France is", "One, two, three,"], "max_tokens": 6,
        "temperature": 0, "logprobs": 2, "echo": true, "stop": ["\n"],
    });
    let (status, whole) = daemon.post("/v1/completions", &body);
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["choices"].as_array().unwrap().len(), 2);
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let chunks = post_stream(&daemon, "/v1/completions", &streaming);
    for index in 0..2 {
        let choice = &whole["choices"][index];
        let mine: Vec<&Value> = chunks.iter().filter(|c| c["choices"][0]["index"] == json!(index)).collect();
        let text: String = mine.iter().map(|c| c["choices"][0]["text"].as_str().unwrap()).collect();
        assert_eq!(text, choice["text"].as_str().unwrap());
        let tokens: Vec<Value> = mine
            .iter()
            .filter_map(|c| c["choices"][0]["logprobs"]["token_logprobs"].as_array().cloned())
            .flatten()
            .collect();
        assert_eq!(Value::Array(tokens), choice["logprobs"]["token_logprobs"]);
        let echoed = choice["text"].as_str().unwrap();
        assert!(echoed.starts_with(body["prompt"][index].as_str().unwrap()), "{echoed}");
    }
}

/// A few-shot prompt of about 300 tokens whose last question has four choices, as token ids:
/// the four prompts, and how many tokens they all share.
fn few_shot_choices(model: &Model) -> (Vec<Vec<u32>>, usize) {
    let shots = [
        ("Which gas do plants take in from the air to make their food?", "Carbon dioxide, which they turn into sugar with the energy of sunlight."),
        ("What is the boiling point of water at sea level?", "One hundred degrees Celsius, or two hundred and twelve degrees Fahrenheit."),
        ("Which organ pumps blood through the human body?", "The heart, a muscle with four chambers that beats about seventy times a minute."),
        ("What force keeps the planets in orbit around the Sun?", "Gravity, the attraction between masses, which weakens with the square of distance."),
        ("Which metal is liquid at room temperature?", "Mercury, a heavy silver metal once used in thermometers and barometers."),
        ("What do bees collect from flowers to make honey?", "Nectar, a sugary liquid that they carry back to the hive and slowly dry out."),
        ("How many bones does an adult human skeleton have?", "Two hundred and six, from the tiny bones of the ear to the long thigh bone."),
        ("Which layer of the atmosphere holds most of the ozone?", "The stratosphere, where ozone absorbs much of the ultraviolet light of the Sun."),
        ("What is the chemical symbol of gold?", "Au, from the Latin word aurum, which means shining dawn."),
    ];
    let mut prefix = String::from("The following are questions about general science, each followed by its answer.\n\n");
    for (question, answer) in shots {
        prefix.push_str(&format!("Question: {question}\nAnswer: {answer}\n\n"));
    }
    prefix.push_str("Question: Which planet is known as the red planet?\nAnswer:");
    let prompts: Vec<Vec<u32>> = [" Mars", " Venus", " Jupiter", " Saturn"]
        .iter()
        .map(|choice| model.tokenize(&format!("{prefix}{choice}"), false, false).unwrap())
        .collect();
    let shared = (0..prompts[0].len()).take_while(|&k| prompts.iter().all(|p| p.get(k) == prompts[0].get(k))).count();
    (prompts, shared)
}

/// A scoring request for `prompt` (echo, no answer), or a short greedy answer when `scoring` is
/// false.
fn completion_body(prompt: Value, scoring: bool) -> Value {
    if scoring {
        json!({"model": MODEL, "prompt": prompt, "echo": true, "logprobs": 1, "max_tokens": 0, "temperature": 0})
    } else {
        json!({"model": MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0})
    }
}

/// Each choice's prompt log-probabilities (the first token's left out) or answer text, with the
/// prompt tokens the choices decoded (prompt tokens less cached ones).
fn read_choices(answer: &Value, scoring: bool) -> (Vec<Value>, u64) {
    let choices = answer["choices"].as_array().expect("choices").iter();
    let read = choices
        .map(|choice| if scoring { json!(choice["logprobs"]["token_logprobs"].as_array().unwrap()[1..]) } else { choice["text"].clone() })
        .collect();
    let usage = &answer["usage"];
    let decoded = usage["prompt_tokens"].as_u64().unwrap() - usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    (read, decoded)
}

/// The four choices sent at once as four concurrent requests: what each got, and the prompt
/// tokens decoded in all.
fn concurrently(daemon: &Daemon, prompts: &[Vec<u32>], scoring: bool) -> (Vec<Value>, u64) {
    let answers: Vec<Value> = std::thread::scope(|scope| {
        let sent: Vec<_> = prompts
            .iter()
            .map(|prompt| scope.spawn(move || daemon.post("/v1/completions", &completion_body(json!(prompt), scoring))))
            .collect();
        sent.into_iter()
            .map(|handle| {
                let (status, answer) = handle.join().expect("a request thread");
                assert_eq!(status, 200, "{answer}");
                answer
            })
            .collect()
    });
    let mut decoded = 0;
    let mut read = Vec::new();
    for answer in &answers {
        let (mut one, tokens) = read_choices(answer, scoring);
        read.append(&mut one);
        decoded += tokens;
    }
    (read, decoded)
}

/// The positions where two lists of prompt log-probabilities differ, with the difference.
fn differences(got: &Value, want: &Value) -> Vec<(usize, f64)> {
    let (got, want) = (got.as_array().unwrap(), want.as_array().unwrap());
    assert_eq!(got.len(), want.len());
    let difference = |(a, b): (&Value, &Value)| a.as_f64().unwrap() - b.as_f64().unwrap();
    got.iter().zip(want).map(difference).enumerate().filter(|(_, d)| *d != 0.0).collect()
}

#[test]
fn choices_sent_together_decode_their_shared_prefix_once_and_score_as_alone() {
    let model = load(MODEL);
    let (prompts, shared) = few_shot_choices(&model);
    assert!(shared >= 250, "the few-shot prefix holds {shared} tokens");
    let requested: usize = shared + prompts.iter().map(|p| p.len() - shared).sum::<usize>();
    let bound = requested as f64 * 1.1;
    // Each choice alone on a fresh daemon: its greedy answer (a cold run), then its scores
    // (the answer scored nothing, so the scores are decoded in full too).
    let mut alone_answers = Vec::new();
    let mut alone_scores = Vec::new();
    for prompt in &prompts {
        let fresh = daemon();
        let (status, answer) = fresh.post("/v1/completions", &completion_body(json!(prompt), false));
        assert_eq!(status, 200, "{answer}");
        alone_answers.push(read_choices(&answer, false).0.remove(0));
        let (status, answer) = fresh.post("/v1/completions", &completion_body(json!(prompt), true));
        assert_eq!(status, 200, "{answer}");
        let (mut scores, decoded) = read_choices(&answer, true);
        assert_eq!(decoded as usize, prompt.len(), "scored alone, the whole prompt is decoded");
        alone_scores.push(scores.remove(0));
    }
    let together = daemon();
    let (answers, generation_decoded) = concurrently(&together, &prompts, false);
    assert_eq!(answers, alone_answers, "greedy answers of choices sent together differ from each alone");
    let (scores, concurrent_decoded) = concurrently(&together, &prompts, true);
    let array = daemon();
    let (status, answer) = array.post("/v1/completions", &completion_body(json!(prompts), true));
    assert_eq!(status, 200, "{answer}");
    let (array_scores, array_decoded) = read_choices(&answer, true);
    // Every position is the prefill's own number, bit for bit, but the question's last row when
    // a choice arrived after the first had decoded it: that row was scored for the first
    // choice's token, so the choice decodes it again alone, and a one-row decode rounds
    // otherwise than a prefill (a few hundredths of a nat).
    let mut worst: f64 = 0.0;
    for (index, alone) in alone_scores.iter().enumerate() {
        for got in [&scores[index], &array_scores[index]] {
            for (position, difference) in differences(got, alone) {
                assert_eq!(position, shared - 1, "choice {index}: {difference} nats from its scores alone at position {position}");
                assert!(difference.abs() <= 0.1, "choice {index}: {difference} nats from its scores alone");
                worst = worst.max(difference.abs());
            }
        }
    }
    eprintln!(
        "4 choices after a {shared}-token prefix, {requested} tokens requested (prefix once + each choice's own): \
         decoded {generation_decoded} generating concurrently, {concurrent_decoded} scoring concurrently, \
         {array_decoded} scoring as one array prompt; worst difference from each choice scored alone {worst:.3e} nats"
    );
    for (how, decoded) in [("generating concurrently", generation_decoded), ("scoring concurrently", concurrent_decoded), ("scoring as an array", array_decoded)] {
        assert!(decoded as f64 <= bound, "{how}: {decoded} prompt tokens decoded for {requested} requested (bound {bound:.0})");
    }
}

#[test]
fn cache_prompt_false_decodes_the_whole_prompt_and_waits_for_no_other() {
    let model = load(MODEL);
    let (prompts, shared) = few_shot_choices(&model);
    let daemon = daemon();
    let cold = |scoring: bool, prompt: &Vec<u32>| {
        let mut body = completion_body(json!(prompt), scoring);
        body["cache_prompt"] = json!(false);
        body
    };
    let decoded = |answer: &Value| read_choices(answer, answer["choices"][0]["logprobs"].is_object()).1 as usize;
    // The four choices sent together, scoring and generating: none waits for another's prefill
    // of the question, none reuses it, each decodes its whole prompt.
    let daemon = &daemon;
    let cold = &cold;
    for scoring in [true, false] {
        let answers: Vec<Value> = std::thread::scope(|scope| {
            let sent: Vec<_> = prompts.iter().map(|prompt| scope.spawn(move || daemon.post("/v1/completions", &cold(scoring, prompt)))).collect();
            sent.into_iter().map(|handle| handle.join().expect("a request thread")).map(|(status, answer)| { assert_eq!(status, 200, "{answer}"); answer }).collect()
        });
        for (prompt, answer) in prompts.iter().zip(&answers) {
            assert_eq!(answer["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{answer}");
            assert_eq!(decoded(answer), prompt.len(), "scoring {scoring}: {answer}");
        }
    }
    // One after another, the slots hold the question: a cold request still decodes it all, the
    // same request with prefix reuse (the default) reuses it.
    let (status, answer) = daemon.post("/v1/completions", &cold(true, &prompts[0]));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(decoded(&answer), prompts[0].len());
    let (status, answer) = daemon.post("/v1/completions", &completion_body(json!(prompts[1]), true));
    assert_eq!(status, 200, "{answer}");
    assert!(decoded(&answer) <= prompts[1].len() - shared + 1, "with reuse: {answer}");
    // Chat takes it too.
    let chat = |cache_prompt: bool| {
        let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Name a red planet."}], "max_tokens": 2, "temperature": 0, "cache_prompt": cache_prompt});
        let (status, answer) = daemon.post("/v1/chat/completions", &body);
        assert_eq!(status, 200, "{answer}");
        answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap()
    };
    chat(true);
    assert!(chat(true) > 0, "a repeated chat reuses its prompt");
    assert_eq!(chat(false), 0);
    // A named context is a cached prompt: asking for both is refused, naming the field.
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "llamay_context": "ctx_1", "cache_prompt": false});
    let (status, answer) = daemon.post("/v1/chat/completions", &body);
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "cache_prompt", "{answer}");
}
