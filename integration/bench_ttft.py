"""Time to first token of a text answer with tools offered, against the same request without
tools (the anchor, measured in the same run), on the three routes: medians over several runs,
printed as a table. With tools offered, text should stream as soon as it cannot be a call.

Offering tools also lengthens the prompt (their description), and prefilling a longer prompt
takes longer whatever streams; a third row sends no tools but a system message about as long
as their description, so the table tells the prompt's share from the streaming's.

Each run asks the same question with its own run number, so the question is prefilled every
time while what comes before it (the tools' description, the same in every request with tools
as a chat client sends it) is reused from the prefix cache. Each kind of request runs in a
block after a warm-up: alternating would have each request overwrite the prefix the other left
in the slot, which measures the slot policy, not streaming. A run whose answer is a call is
left out and counted.

    integration/run.sh --bench ttft [--runs 15] [--tokens 32]     (starts the daemon)
    LLAMAY_URL=http://127.0.0.1:11435 python integration/bench_ttft.py [--runs 15]
"""

import argparse
import json
import os
import statistics
import time

import requests

BASE = os.environ.get("LLAMAY_URL", "http://127.0.0.1:11435")
MODEL = os.environ.get("LLAMAY_MODEL", "smollm2:135m")
QUESTION = "Write two sentences about the sea."
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                  "required": ["city", "unit"]}
OPENAI_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for one city.", "parameters": WEATHER_SCHEMA}}]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Current weather for one city.", "input_schema": WEATHER_SCHEMA}]
# About as many tokens as the tools' description takes in SmolLM2's prompt.
LONG_SYSTEM = "You are a helpful assistant. Answer the user in plain sentences. " * 14
# What each row sends: tools, or a system message.
KINDS = {"none": (False, None), "tools": (True, None), "long system": (False, LONG_SYSTEM)}


def messages(question, system):
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]


def openai_request(question, tools, system, tokens):
    body = {"model": MODEL, "stream": True, "temperature": 0, "max_tokens": tokens,
            "messages": messages(question, system)}
    if tools:
        body["tools"] = OPENAI_TOOLS
    return f"{BASE}/v1/chat/completions", body


def anthropic_request(question, tools, system, tokens):
    body = {"model": MODEL, "stream": True, "temperature": 0, "max_tokens": tokens,
            "messages": [{"role": "user", "content": question}]}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = ANTHROPIC_TOOLS
    return f"{BASE}/v1/messages", body


def ollama_request(question, tools, system, tokens):
    body = {"model": MODEL, "stream": True, "options": {"temperature": 0, "num_predict": tokens},
            "messages": messages(question, system)}
    if tools:
        body["tools"] = OPENAI_TOOLS
    return f"{BASE}/api/chat", body


def openai_piece(line):
    """(text, is a call) of one streamed line of each route."""
    if not line.startswith(b"data: ") or line == b"data: [DONE]":
        return "", False
    choices = json.loads(line[len(b"data: "):]).get("choices") or [{}]
    delta = choices[0].get("delta", {})
    return delta.get("content") or "", bool(delta.get("tool_calls"))


def anthropic_piece(line):
    if not line.startswith(b"data: "):
        return "", False
    event = json.loads(line[len(b"data: "):])
    if event["type"] == "content_block_start":
        return "", event["content_block"]["type"] == "tool_use"
    if event["type"] == "content_block_delta" and event["delta"]["type"] == "text_delta":
        return event["delta"]["text"], False
    return "", False


def ollama_piece(line):
    if not line:
        return "", False
    message = json.loads(line).get("message", {})
    return message.get("content") or "", bool(message.get("tool_calls"))


ROUTES = {"openai": (openai_request, openai_piece), "anthropic": (anthropic_request, anthropic_piece),
          "ollama": (ollama_request, ollama_piece)}


def prompt_tokens(kind):
    """How long the prompt of a kind of request is (read from one unstreamed OpenAI request)."""
    tools, system = KINDS[kind]
    _, body = openai_request(QUESTION, tools, system, 1)
    body["stream"] = False
    response = requests.post(f"{BASE}/v1/chat/completions", json=body, timeout=600)
    response.raise_for_status()
    return response.json()["usage"]["prompt_tokens"]


def first_token(route, question, kind, tokens):
    """Seconds to the first piece of text, the pieces of text, and whether the answer was a call."""
    build, piece = ROUTES[route]
    url, body = build(question, *KINDS[kind], tokens)
    started = time.perf_counter()
    first, pieces, called = None, 0, False
    with requests.post(url, json=body, stream=True, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            text, call = piece(line)
            called |= call
            if text:
                pieces += 1
                if first is None:
                    first = time.perf_counter() - started
    return first, pieces, called


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    print(f"{MODEL} at {BASE}, {args.runs} runs per row, {args.tokens} tokens, median seconds to the first text")
    lengths = {kind: prompt_tokens(kind) for kind in KINDS}
    print(f"{'route':<10} {'request':<12} {'prompt':>7} {'ttft p50':>9} {'ttft min':>9} {'pieces p50':>11} "
          f"{'calls':>6} {'vs none':>8}")
    for route in ROUTES:
        times = {kind: [] for kind in KINDS}
        pieces = {kind: [] for kind in KINDS}
        calls = {kind: 0 for kind in KINDS}
        for kind in KINDS:
            # A warm-up, so what precedes the question is cached as a chat client's would be.
            first_token(route, f"{QUESTION} (warm-up)", kind, args.tokens)
            for run in range(args.runs):
                first, count, called = first_token(route, f"{QUESTION} (run {run})", kind, args.tokens)
                if called or first is None:
                    calls[kind] += 1
                    continue
                times[kind].append(first)
                pieces[kind].append(count)
        anchor = statistics.median(times["none"]) if times["none"] else None
        for kind in KINDS:
            row = f"{route:<10} {kind:<12} {lengths[kind]:>7}"
            if not times[kind]:
                print(f"{row} {'-':>9} {'-':>9} {'-':>11} {calls[kind]:>6}")
                continue
            median = statistics.median(times[kind])
            ratio = f"{median / anchor:.2f}x" if anchor else "-"
            print(f"{row} {median:>9.3f} {min(times[kind]):>9.3f} {statistics.median(pieces[kind]):>11.0f} "
                  f"{calls[kind]:>6} {ratio:>8}")


if __name__ == "__main__":
    main()
