"""Scoring for evaluation (issue 59) through the official clients: the openai client reads chat
and completions log-probabilities (echo of a prompt of token ids included), the ollama client
reads Ollama's, and the tokenizer routes round-trip."""

import json
import math
import os
import subprocess
import sys

import ollama
import openai
import pytest
import requests

from conftest import BASE, MODEL, REPO

client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused")
QUESTION = [{"role": "user", "content": "Name three colours."}]


def test_openai_chat_logprobs_are_greedy_top_1_and_sorted():
    answer = client.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=10, logprobs=True, top_logprobs=4
    )
    content = answer.choices[0].logprobs.content
    assert content, answer
    assert "".join(t.token for t in content) == answer.choices[0].message.content
    for token in content:
        assert len(token.top_logprobs) == 4
        assert token.top_logprobs[0].token == token.token
        values = [t.logprob for t in token.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert token.logprob <= 0


def test_openai_chat_logprobs_stream_as_they_answer():
    whole = client.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=10, logprobs=True, top_logprobs=2
    )
    streamed = []
    for chunk in client.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=10, logprobs=True, top_logprobs=2, stream=True
    ):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            streamed.extend(chunk.choices[0].logprobs.content)
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in whole.choices[0].logprobs.content]


def test_openai_completions_echo_scores_a_prompt_of_token_ids():
    text = "The capital of France is Paris"
    tokens = requests.post(f"{BASE}/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False}, timeout=60).json()["tokens"]
    answer = client.completions.create(model=MODEL, prompt=tokens, echo=True, logprobs=2, max_tokens=0, temperature=0)
    logprobs = answer.choices[0].logprobs
    assert answer.choices[0].text == text
    assert len(logprobs.tokens) == len(tokens)
    assert logprobs.token_logprobs[0] is None
    assert all(value <= 0 for value in logprobs.token_logprobs[1:])
    assert logprobs.top_logprobs[0] is None
    assert all(1 <= len(top) <= 2 for top in logprobs.top_logprobs[1:])
    assert logprobs.text_offset[0] == 0 and logprobs.text_offset == sorted(logprobs.text_offset)
    # " Paris" after "The capital of France is" is likely for any language model.
    assert math.exp(logprobs.token_logprobs[-1]) > 0.05, logprobs.token_logprobs
    assert answer.usage.prompt_tokens == len(tokens)


def test_openai_completions_generate_n_choices_with_stop():
    answer = client.completions.create(model=MODEL, prompt="One, two, three,", max_tokens=8, temperature=0.8, seed=3, n=2, stop=["\n"])
    assert [c.index for c in answer.choices] == [0, 1]
    assert all("\n" not in c.text for c in answer.choices)
    try:
        client.completions.create(model=MODEL, prompt="x", suffix="y", max_tokens=1)
        raise AssertionError("suffix was accepted")
    except openai.BadRequestError as error:
        assert "suffix" in str(error)


def test_ollama_client_reads_logprobs():
    ollama_client = ollama.Client(host=BASE)
    answer = ollama_client.chat(
        model=MODEL, messages=QUESTION, options={"temperature": 0, "num_predict": 8}, logprobs=True, top_logprobs=3
    )
    assert answer.logprobs, answer
    first = answer.logprobs[0]
    assert first.top_logprobs[0].token == first.token
    assert len(first.top_logprobs) == 3
    generated = ollama_client.generate(model=MODEL, prompt="Count: one, two,", options={"temperature": 0, "num_predict": 4}, logprobs=True)
    assert generated.logprobs and all(entry.logprob <= 0 for entry in generated.logprobs)


def test_tokenizer_routes_round_trip():
    text = "naïve café, 42 🦀"
    tokenized = requests.post(f"{BASE}/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False}, timeout=60).json()
    assert tokenized["count"] == len(tokenized["tokens"])
    back = requests.post(f"{BASE}/detokenize", json={"model": MODEL, "tokens": tokenized["tokens"]}, timeout=60).json()
    assert back["prompt"] == text
    info = requests.get(f"{BASE}/tokenizer_info", params={"model": MODEL}, timeout=60).json()
    assert info["eos_token"] and info["model_max_length"] == tokenized["max_model_len"]
    refused = requests.post(f"{BASE}/detokenize", json={"model": MODEL, "tokens": [10**9]}, timeout=60)
    assert refused.status_code == 400 and "tokens[0]" in refused.json()["error"]["message"]


# lm-evaluation-harness, unchanged, against /v1/completions and the tokenizer routes: a
# multiple-choice task (loglikelihood: echo logprobs of each choice after the question) and a
# generate_until task, on data of testdata/lm_eval. Its accuracy must equal the one this test
# computes from the daemon's echo log-probabilities of the same token ids (those are checked
# against llama.cpp's logits of a direct decode by the Rust test scoring::echo_logprobs_...).
TASKS = REPO / "testdata" / "lm_eval"
MC_TASK = """task: llamay_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""
GEN_TASK = """task: llamay_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: " {{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 12
  do_sample: false
  temperature: 0
metric_list:
  - metric: exact_match
"""


def tokenize(text):
    return requests.post(f"{BASE}/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False}, timeout=60).json()["tokens"]


def reference_choice_logprob(context, continuation):
    """lm-eval's split of a (context, continuation) pair into token ids, scored by echo."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        continuation = context[-spaces:] + continuation
        context = context[:-spaces]
    whole = tokenize(context + continuation)
    context_tokens = tokenize(context)
    answer = client.completions.create(model=MODEL, prompt=whole, echo=True, logprobs=1, max_tokens=0, temperature=0)
    return sum(answer.choices[0].logprobs.token_logprobs[len(context_tokens):])


def test_lm_eval_harness_scores_as_the_echo_logprobs_do(tmp_path):
    lm_eval = pytest.importorskip("lm_eval")
    (tmp_path / "mc.yaml").write_text(MC_TASK.format(data=TASKS / "multiple_choice.jsonl"))
    (tmp_path / "gen.yaml").write_text(GEN_TASK.format(data=TASKS / "generate.jsonl"))
    out = tmp_path / "out"
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    model_args = f"model={MODEL},base_url={BASE}/v1/completions,tokenizer_backend=remote,tokenized_requests=True,num_concurrent=1,max_retries=1"
    run = subprocess.run(
        [sys.executable, "-m", "lm_eval", "--model", "local-completions", "--model_args", model_args,
         "--tasks", "llamay_mc,llamay_gen", "--include_path", str(tmp_path), "--output_path", str(out)],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
    docs = [json.loads(line) for line in (TASKS / "multiple_choice.jsonl").read_text().splitlines()]
    correct = 0
    for doc in docs:
        context = f"Question: {doc['question']}\nAnswer:"
        scores = [reference_choice_logprob(context, " " + choice) for choice in doc["choices"]]
        correct += scores.index(max(scores)) == doc["answer"]
    assert results["llamay_mc"]["acc,none"] == pytest.approx(correct / len(docs)), (results, correct)
    eos = requests.get(f"{BASE}/tokenizer_info", timeout=60).json()["eos_token"]
    items = [json.loads(line) for line in (TASKS / "generate.jsonl").read_text().splitlines()]
    matched = 0
    for item in items:
        answer = client.completions.create(
            model=MODEL, prompt=tokenize(item["question"]), max_tokens=12, temperature=0, stop=["\n", eos]
        )
        matched += answer.choices[0].text == " " + item["answer"]
    assert results["llamay_gen"]["exact_match,none"] == pytest.approx(matched / len(items)), (results, matched)
    print(f"lm-eval: acc {results['llamay_mc']['acc,none']} over {len(docs)} questions, exact_match {results['llamay_gen']['exact_match,none']} over {len(items)}")
