#!/usr/bin/env python3
"""Extraction bench (issue 50): llamay with acceleration, llamay without, and llama.cpp's own
llama-server, on the same GGUF, driven by the same requests: the extraction prompts of
testdata/extraction/prompts.json (orders, tickets, invoices, contacts: a text in the prompt, and
a closed object schema asking for its fields), OpenAI chat completions with `response_format`
json_schema (llama-server's own route and field for it), non-streaming. With `--tasks free`
(or `extraction,free`), the same on free text: the open questions of
testdata/extraction/free_text.json, no constraint and nothing in the prompt to copy, where
acceleration must cost nothing.

    benches/peer/extraction_bench.py [--models smollm2:135m,gemma3:270m] [--rounds 5]
        [--clients 1,4] [--samplings greedy,sampled] [--tasks extraction,free]

Both servers run at once (llamay serves both llamay columns: `llamay_accelerate` is per request);
llama-server without its host-memory prompt cache (`--cache-ram 0`), which would otherwise answer
every round after the first from prompts it saw before, as no new document is.
In every round each configuration (model, clients, sampling) runs all prompts once per column,
the columns in an order that rotates with the round; the bench waits until the server that just
ran is idle before the next column. Printed per configuration, medians over rounds:
- seconds per document (the wall time of the pass over the prompt count; 4 clients: four
  requests at a time) for each column, and the ratios accelerated/llama-server,
  accelerated/plain;
- tokens per decode step of the accelerated runs: generated tokens over generated tokens less
  the drafted tokens the model confirmed (read from llamay's /v1/stats around each pass);
- greedy: how many documents the accelerated run wrote exactly as the plain run of the same round
  did, against how many two plain runs (consecutive rounds) agree on, the noise floor;
- per column, documents that validate against their schema of those that ended by themselves
  (free text: that ended, of all), medians over rounds; the rest hit the token limit.
Token counts come from each response's `usage`. Then the issue's goals, met or not.
Standard library only (the schema check covers the prompts' keywords); run by hand, not in CI.
"""

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_bench import ROOT, add_server_arguments, find_llama_server, gguf_path, request_json, settle, start  # noqa: E402

PROMPT_FILES = {"extraction": os.path.join(ROOT, "testdata", "extraction", "prompts.json"),
                "free": os.path.join(ROOT, "testdata", "extraction", "free_text.json")}
SAMPLINGS = {
    "greedy": {"temperature": 0.0},
    "sampled": {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "seed": 11},
}
COLUMNS = ["accelerated", "plain", "llama-server"]


def load_prompts(task):
    with open(PROMPT_FILES[task]) as f:
        return json.load(f)


def valid(document, schema):
    """The prompts' schemas use type, properties, required, additionalProperties, items, enum."""
    kind = schema.get("type")
    checks = {"object": dict, "array": list, "string": str, "boolean": bool}
    if kind == "integer" and not (isinstance(document, int) and not isinstance(document, bool)):
        return False
    if kind == "number" and not (isinstance(document, (int, float)) and not isinstance(document, bool)):
        return False
    if kind in checks and not isinstance(document, checks[kind]):
        return False
    if "enum" in schema and document not in schema["enum"]:
        return False
    if isinstance(document, dict):
        properties = schema.get("properties", {})
        if any(key not in document for key in schema.get("required", [])):
            return False
        if schema.get("additionalProperties") is False and any(key not in properties for key in document):
            return False
        return all(valid(value, properties[key]) for key, value in document.items() if key in properties)
    if isinstance(document, list) and "items" in schema:
        return all(valid(item, schema["items"]) for item in document)
    return True


def ask(port, model, prompt, sampling, tokens, accelerate):
    schema = prompt.get("schema")
    content = "Extract the fields of this text as JSON.\n\n" + prompt["text"] if schema else prompt["text"]
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": tokens, **sampling}
    if schema:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": prompt["name"], "schema": schema}}
    if accelerate is not None:
        body["llamay_accelerate"] = accelerate
    status, raw = request_json(port, "POST", "/v1/chat/completions", body)
    if status != 200:
        raise SystemExit(f"{prompt['name']}: HTTP {status}: {raw[:300]!r}")
    answer = json.loads(raw)
    choice = answer["choices"][0]
    text = choice["message"].get("content") or ""
    ended = choice.get("finish_reason") == "stop"
    try:
        ok = ended and (schema is None or valid(json.loads(text), schema))
    except ValueError:
        ok = False
    return text, answer["usage"]["completion_tokens"], ended, ok


def drafts_accepted(port):
    status, raw = request_json(port, "GET", "/v1/stats", None)
    models = json.loads(raw).get("models", []) if status == 200 else []
    return sum(m["totals"].get("drafts", {}).get("accepted", 0) for m in models)


def run_pass(port, model, prompts, sampling, tokens, clients, accelerate, llamay_port):
    accepted_before = drafts_accepted(llamay_port) if accelerate else 0
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        results = list(pool.map(lambda p: ask(port, model, p, sampling, tokens, accelerate), prompts))
    seconds = time.perf_counter() - started
    generated = sum(r[1] for r in results)
    accepted = drafts_accepted(llamay_port) - accepted_before if accelerate else 0
    return {
        "per_document": seconds / len(prompts),
        "outputs": [r[0] for r in results],
        "generated": generated,
        "steps": max(generated - accepted, 1),
        "ended": sum(r[2] for r in results),
        "valid": sum(r[3] for r in results),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2:135m,gemma3:270m")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--samplings", default="greedy,sampled")
    parser.add_argument("--tasks", default="extraction", help="extraction, free (text, no constraint) or both")
    parser.add_argument("--tokens", type=int, default=160, help="max_tokens per document")
    # llama-server's host-memory prompt cache would serve rounds 2-5's repeated prompts without a
    # prefill (llamay keeps prompts only in its sequences): off, as for the new documents
    # extraction meets in use.
    add_server_arguments(parser, context=2048, llama_server_flags="--cache-ram 0")
    args = parser.parse_args()
    tasks = {task: load_prompts(task) for task in args.tasks.split(",")}
    llama_server = find_llama_server(args.llama_server)
    print(", ".join(f"{len(prompts)} {task} prompts" for task, prompts in tasks.items()) +
          f", {args.rounds} rounds, threads {args.threads}, slots {args.parallel}, max_tokens {args.tokens}\n"
          f"llama-server: {llama_server}\nllamay: {args.llamay}\n")
    summary = []
    for model in args.models.split(","):
        gguf = gguf_path(args.llamay, model)
        servers = {"llamay": start("llamay", args, gguf, llama_server, model),
                   "llama-server": start("llama-server", args, gguf, llama_server, model)}
        try:
            port = {"accelerated": servers["llamay"].port, "plain": servers["llamay"].port,
                    "llama-server": servers["llama-server"].port}
            accelerate = {"accelerated": True, "plain": False, "llama-server": None}
            server_of = {"accelerated": "llamay", "plain": "llamay", "llama-server": "llama-server"}
            # Warm-up: each server loads its weights and compiles the schemas once.
            for column in ["accelerated", "llama-server"]:
                for prompts in tasks.values():
                    run_pass(port[column], model, prompts[:4], SAMPLINGS["greedy"], 16, 1, accelerate[column],
                             servers["llamay"].port)
            configurations = [(task, prompts, int(clients), sampling_name) for task, prompts in tasks.items()
                              for clients in args.clients.split(",") for sampling_name in args.samplings.split(",")]
            for task, prompts, clients, sampling_name in configurations:
                sampling = SAMPLINGS[sampling_name]
                rounds = []
                for round_index in range(args.rounds):
                    order = COLUMNS[round_index % 3:] + COLUMNS[:round_index % 3]
                    result = {}
                    for column in order:
                        result[column] = run_pass(port[column], model, prompts, sampling, args.tokens, clients,
                                                  accelerate[column], servers["llamay"].port)
                        settle(servers[server_of[column]])
                    rounds.append(result)
                    print(f"{model} {task} {clients} client(s) {sampling_name} round {round_index + 1}: " + ", ".join(
                        f"{c} {result[c]['per_document']:.2f} s/doc" for c in COLUMNS), flush=True)
                summary.append(report(model, task, clients, sampling_name, rounds, len(prompts)))
                # Each configuration's row as soon as it is done, so a cut run keeps them.
                print(summary[-1]["line"], flush=True)
        finally:
            for server in servers.values():
                server.stop()
    print("\n| model | task | clients | sampling | accelerated s/doc | plain s/doc | llama-server s/doc | acc/llama-server | "
          "acc/plain | tokens/step | greedy acc=plain | plain=plain | valid of ended acc, plain, llama-server |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in summary:
        print(row["line"])
    print()
    for row in summary:
        for name, met, value in row["goals"]:
            print(f"  [{'met' if met else 'NOT met'}] {row['model']} {row['task']} {row['clients']} client(s) "
                  f"{row['sampling']}: {name}: {value}")


def report(model, task, clients, sampling, rounds, count):
    median = lambda column, key: statistics.median(r[column][key] for r in rounds)
    acc, plain, theirs = (median(c, "per_document") for c in COLUMNS)
    vs_server = statistics.median(r["accelerated"]["per_document"] / r["llama-server"]["per_document"] for r in rounds)
    vs_plain = statistics.median(r["accelerated"]["per_document"] / r["plain"]["per_document"] for r in rounds)
    per_step = statistics.median(r["accelerated"]["generated"] / r["accelerated"]["steps"] for r in rounds)
    same = lambda a, b: sum(x == y for x, y in zip(a, b))
    acc_equal = statistics.median(same(r["accelerated"]["outputs"], r["plain"]["outputs"]) for r in rounds)
    plain_equal = (statistics.median(same(a["plain"]["outputs"], b["plain"]["outputs"]) for a, b in zip(rounds, rounds[1:]))
                   if len(rounds) > 1 else float("nan"))
    valid = ", ".join(f"{median(c, 'valid'):.0f}/{median(c, 'ended'):.0f}" for c in COLUMNS)
    greedy = sampling == "greedy"
    line = (f"| {model} | {task} | {clients} | {sampling} | {acc:.2f} | {plain:.2f} | {theirs:.2f} | {vs_server:.2f}x | "
            f"{vs_plain:.2f}x | {per_step:.2f} | {f'{acc_equal:.0f}/{count}' if greedy else '-'} | "
            f"{f'{plain_equal:.0f}/{count}' if greedy else '-'} | {valid} |")
    goals = []
    if task == "free":
        # Nothing to copy and nothing forced: acceleration may only cost (drafts that miss).
        goals.append(("accelerated no slower than plain (>= 0.98x its speed)", vs_plain <= 1 / 0.98,
                      f"{1 / vs_plain:.3f}x"))
    elif greedy:
        goals.append(("time per document <= 0.5x llama-server's" if clients == 1 else "time per document <= 0.7x llama-server's",
                      vs_server <= (0.5 if clients == 1 else 0.7), f"{vs_server:.2f}x"))
        if clients == 1:
            goals.append(("time per document <= 0.6x plain llamay's", vs_plain <= 0.6, f"{vs_plain:.2f}x"))
    if task != "free":
        ended, valid_count = (sum(r["accelerated"][key] for r in rounds) for key in ("ended", "valid"))
        goals.append(("every accelerated document that ended by itself is schema-valid", valid_count == ended,
                      f"{valid_count} of {ended} over all rounds"))
    if greedy:
        goals.append(("greedy output = plain as often as two plain runs agree", acc_equal >= plain_equal,
                      f"{acc_equal:.0f} against {plain_equal:.0f} of {count}"))
    return {"model": model, "task": task, "clients": clients, "sampling": sampling, "line": line, "goals": goals}


if __name__ == "__main__":
    main()
