"""Time to first token of turn 2 of a ~2,000-token conversation on /v1/responses: continued with
`previous_response_id` against the client resending the whole history as input items (both
after the same turn 1, so the model may still hold its KV state), and, as the anchor measured in
the same run, the same history sent where no turn 1 ran (everything prefilled). Medians over
several runs, printed as a table with the ratio to the anchor and the `cached_tokens` reported.

Each run writes its own document (its run number first), so nothing is reused across runs or
rows; each row's turn 1 runs just before its turn 2, so every row sees the same slot state.

    integration/run.sh --bench responses [--runs 5]       (starts the daemon)
    LLAMAY_URL=http://127.0.0.1:11435 python integration/bench_responses_ttft.py [--runs 5]
"""

import argparse
import json
import os
import statistics
import time

import requests

BASE = os.environ.get("LLAMAY_URL", "http://127.0.0.1:11435")
MODEL = os.environ.get("LLAMAY_MODEL", "smollm2:135m")
ANIMALS = ["otter", "heron", "badger", "lynx", "marten", "wren", "stoat", "vole"]
PLACES = ["river", "marsh", "forest", "valley", "meadow", "harbour", "orchard", "moor"]


def document(run, sentences=93):
    """About 2,000 tokens of prose, different for every run and row."""
    lines = [f"Field notes, series {run}."]
    for k in range(sentences):
        animal, place = ANIMALS[(k * 3 + run) % len(ANIMALS)], PLACES[(k * 5 + run) % len(PLACES)]
        lines.append(f"On day {k + 1} the {animal} was seen near the {place} at {6 + k % 12} o'clock.")
    return " ".join(lines) + "\nSummarise these notes in one sentence."


def create(body):
    response = requests.post(f"{BASE}/v1/responses", json=body, timeout=600)
    response.raise_for_status()
    return response.json()


def first_token(body):
    """Seconds to the first output_text delta of a streamed response, and its final usage."""
    started = time.perf_counter()
    ttft, usage = None, None
    with requests.post(f"{BASE}/v1/responses", json={**body, "stream": True}, stream=True, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith(b"data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "response.output_text.delta" and ttft is None:
                ttft = time.perf_counter() - started
            if event["type"] in ("response.completed", "response.incomplete"):
                usage = event["response"]["usage"]
    return ttft, usage


def turn_one(run, row, tokens):
    doc = document(run * 10 + row)
    first = create({"model": MODEL, "input": doc, "max_output_tokens": tokens, "temperature": 0})
    return doc, first


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    question = "Which animal was seen most often?"
    rows = {"previous_response_id": [], "whole history resent": [], "cold (anchor)": []}
    cached = {name: [] for name in rows}
    prompt = []
    for run in range(args.runs + 1):
        samples = {}
        _, first = turn_one(run, 0, args.tokens)
        samples["previous_response_id"] = first_token({
            "model": MODEL, "previous_response_id": first["id"], "input": question,
            "max_output_tokens": args.tokens, "temperature": 0, "store": False})
        doc, first = turn_one(run, 1, args.tokens)
        history = [{"role": "user", "content": doc},
                   {"role": "assistant", "content": first["output_text"]},
                   {"role": "user", "content": question}]
        samples["whole history resent"] = first_token({
            "model": MODEL, "input": history, "max_output_tokens": args.tokens, "temperature": 0, "store": False})
        # The same shape of history, with no turn 1 before it: the whole prompt is prefilled.
        cold = [{"role": "user", "content": document(run * 10 + 2)}, history[1], history[2]]
        samples["cold (anchor)"] = first_token({
            "model": MODEL, "input": cold, "max_output_tokens": args.tokens, "temperature": 0, "store": False})
        if run == 0:
            continue  # warm-up: the model loads, the allocator settles
        for name, (ttft, usage) in samples.items():
            rows[name].append(ttft)
            cached[name].append(usage["input_tokens_details"]["cached_tokens"])
            prompt.append(usage["input_tokens"])
    anchor = statistics.median(rows["cold (anchor)"])
    print(f"turn 2 of a {statistics.median(prompt)}-token conversation, {MODEL}, median of {args.runs} runs")
    print(f"{'turn 2 sent as':<24} {'TTFT ms':>9} {'vs cold':>8} {'cached tokens':>14}")
    for name, times in rows.items():
        median = statistics.median(times)
        print(f"{name:<24} {median * 1000:>9.0f} {median / anchor:>7.2f}x {statistics.median(cached[name]):>14.0f}")


if __name__ == "__main__":
    main()
