"""Scoring for evaluation (issue 59) through the official clients: the openai client reads chat
and completions log-probabilities (echo of a prompt of token ids included), the ollama client
reads Ollama's, and the tokenizer routes round-trip."""

import math

import ollama
import openai
import requests

from conftest import BASE, MODEL

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
