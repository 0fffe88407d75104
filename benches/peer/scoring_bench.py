#!/usr/bin/env python3
"""Scoring bench (issue 59): a multiple-choice task of --items items x 4 choices after a ~300-token
few-shot prefix, scored three ways on the same GGUF:
1. lm-evaluation-harness (`--model local-completions`, `tokenizer_backend=remote,
   tokenized_requests=True`) against llamay, prefix reuse on (the default);
2. the same lm-eval run with `cache_prompt: false` added to each of its requests (llama-server's
   field; llamay then reuses no prefix and decodes every prompt whole);
3. llama.cpp's llama-server, as far as it can: it refuses `echo` ("Only no echo is supported"),
   which is what lm-eval's loglikelihood requests send, so lm-eval cannot score against it. The
   bench asks it instead for the log-probabilities of each choice as a forced continuation: the
   requests of run 1 replayed in the order and concurrency lm-eval sent them, each as
   `/v1/completions` with the context's token ids as `prompt`, a grammar that allows only the
   choice's text, `logprobs` and greedy decoding (its default `cache_prompt` on). Its choice is
   forced but its tokenization is the sampler's (the likeliest tokens that spell it), and each
   choice token is a decode step of its own.

    benches/peer/scoring_bench.py [--models smollm2:135m,gemma3:270m] [--items 100]
        [--style text,letters] [--concurrent 4]

Styles: `text` asks ARC-like questions whose choices are words of different token lengths;
`letters` asks MMLU-like questions that list the options and score the letters " A".." D".
lm-eval sends a task's requests longest first (its Collator sorts by total token length), so
the four choices of one item arrive together only when they have the same length (letters);
text choices of different lengths reach the server far apart.

lm-eval runs in a child process of this script (the integration venv's Python:
/work/main/integration/.venv or `integration/venv.sh`), unchanged but for two wrappers: one
times its loglikelihood phase (the requests, not its start-up and tokenization) and records the
requests it sent (token ids, context length, the score it read back), and, in run 2, one that adds
`cache_prompt: false` to each payload. The task's data (items and few-shot examples) are
generated deterministically into a temporary directory and read offline
(`HF_DATASETS_OFFLINE=1`).

Printed per model and style: tokens requested (the prompt tokens of all requests), the ideal
(each distinct prefix once: the few-shot prefix once, each item's question once, each choice's
own tokens), tokens decoded (llamay: growth of /v1/stats `prompt_tokens` less
`prefix_tokens_saved`; llama-server: `timings.prompt_n` plus the choice tokens it decodes one by
one), decoded/ideal, seconds per item, accuracy, and run 1 against run 2. Then the goals:
decoded <= 1.1x ideal and time per item <= 0.35x the run without reuse. Run by hand, not in CI.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_bench import add_server_arguments, find_llama_server, gguf_path, request_json, settle, start  # noqa: E402

CATEGORIES = {
    "fruit": ["apple", "banana", "cherry", "mango", "pear", "plum", "apricot", "pineapple", "grapefruit"],
    "metal": ["iron", "copper", "silver", "gold", "aluminium", "zinc", "titanium", "magnesium", "tungsten"],
    "planet": ["Mars", "Venus", "Jupiter", "Saturn", "Mercury", "Neptune", "Uranus"],
    "musical instrument": ["violin", "trumpet", "piano", "flute", "cello", "clarinet", "harp", "saxophone"],
    "mammal": ["whale", "horse", "rabbit", "elephant", "dolphin", "squirrel", "kangaroo", "giraffe"],
    "bird": ["sparrow", "eagle", "penguin", "parrot", "owl", "flamingo", "woodpecker", "ostrich"],
    "vegetable": ["carrot", "potato", "cabbage", "spinach", "broccoli", "cucumber", "cauliflower"],
    "gemstone": ["diamond", "ruby", "emerald", "sapphire", "topaz", "amethyst", "opal"],
    "tool": ["hammer", "screwdriver", "saw", "wrench", "chisel", "pliers", "drill"],
    "gas in the air": ["nitrogen", "oxygen", "argon", "carbon dioxide", "neon", "helium"],
}
NAMES = ["Ada", "Bruno", "Chloe", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Keira", "Luca",
         "Maya", "Nils", "Olga", "Pablo", "Rosa", "Samir", "Tara", "Umar"]
SITUATIONS = [
    "sorts a pile of picture cards for a science class",
    "reads the next question of a quiz aloud at the library",
    "stands before a display case on a museum visit",
    "fills in a worksheet about classifying things",
    "plays a guessing game with a younger cousin",
    "writes labels for the shelves of a school storeroom",
    "checks the answers of a crossword puzzle in the newspaper",
    "prepares flash cards for a test on Friday",
    "listens to a teacher describe a field trip",
    "helps a friend tidy a box of old toys and books",
]
LETTERS = ["A", "B", "C", "D"]
# About 300 tokens of few-shot examples (a letters example lists its options).
SHOTS = {"text": 10, "letters": 6}


def make_items(count, style, rng, asked):
    """`count` items whose questions differ from each other and from those in `asked`."""
    items = []
    while len(items) < count:
        category = rng.choice(sorted(CATEGORIES))
        question = f"{rng.choice(NAMES)} {rng.choice(SITUATIONS)}. Which of these is a kind of {category}?"
        if question in asked:
            continue
        asked.add(question)
        right = rng.choice(CATEGORIES[category])
        others = [c for c in sorted(CATEGORIES) if c != category]
        choices = [right, *(rng.choice(CATEGORIES[c]) for c in rng.sample(others, 3))]
        rng.shuffle(choices)
        answer = choices.index(right)
        if style == "letters":
            question += "".join(f"\n{letter}. {choice}" for letter, choice in zip(LETTERS, choices))
            choices = LETTERS
        items.append({"question": question, "choices": choices, "answer": answer})
    return items


TASK = """task: scoring_bench
dataset_path: json
dataset_kwargs:
  data_files:
    train: {shots}
    test: {items}
training_split: train
fewshot_split: train
test_split: test
num_fewshot: {shot_count}
fewshot_config:
  sampler: first_n
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""


def write_task(directory, items, style, shots):
    """The task's yaml and data: `items` test items and `shots` few-shot examples (first_n: the
    same prefix before every item), all from one seed."""
    rng, asked = random.Random(59), set()
    examples = make_items(shots, style, rng, asked)
    tests = make_items(items, style, rng, asked)
    for name, rows in (("shots.jsonl", examples), ("items.jsonl", tests)):
        with open(os.path.join(directory, name), "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
    with open(os.path.join(directory, "scoring_bench.yaml"), "w") as f:
        f.write(TASK.format(shots=os.path.join(directory, "shots.jsonl"), items=os.path.join(directory, "items.jsonl"),
                            shot_count=shots))


def run_lm_eval_child():
    """In the child: lm-eval's own command line, with the wrappers described above; what they
    record goes to $SCORING_BENCH_RECORD."""
    from lm_eval.models.api_models import TemplateAPI
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    import lm_eval.__main__

    record = {"requests": [], "seconds": 0.0}
    score_call = TemplateAPI._loglikelihood_tokens

    def timed(self, requests, **kwargs):
        started = time.perf_counter()
        try:
            return score_call(self, requests, **kwargs)
        finally:
            record["seconds"] += time.perf_counter() - started

    parse = LocalCompletionsAPI.parse_logprobs

    def parse_and_record(outputs, tokens=None, ctxlens=None, **kwargs):
        results = parse(outputs=outputs, tokens=tokens, ctxlens=ctxlens, **kwargs)
        for prompt, ctxlen, (logprob, greedy) in zip(tokens, ctxlens, results):
            record["requests"].append({"tokens": prompt, "ctxlen": ctxlen, "logprob": logprob, "greedy": greedy})
        return results

    TemplateAPI._loglikelihood_tokens = timed
    LocalCompletionsAPI.parse_logprobs = staticmethod(parse_and_record)
    if os.environ.get("SCORING_BENCH_COLD") == "1":
        payload = LocalCompletionsAPI._create_payload

        def cold_payload(self, *args, **kwargs):
            return {**payload(self, *args, **kwargs), "cache_prompt": False}

        LocalCompletionsAPI._create_payload = cold_payload
    try:
        lm_eval.__main__.cli_evaluate()
    finally:
        with open(os.environ["SCORING_BENCH_RECORD"], "w") as f:
            json.dump(record, f)


def llamay_counters(port, model):
    status, raw = request_json(port, "GET", "/v1/stats", None)
    for entry in json.loads(raw)["models"] if status == 200 else []:
        if entry.get("name") == model or entry.get("model") == model:
            totals = entry["totals"]
            return totals["prompt_tokens"], totals["prefix_tokens_saved"]
    raise SystemExit(f"/v1/stats lists no {model}: {raw[:300]!r}")


def lm_eval_run(args, port, model, task_dir, cold):
    """One lm-eval run against llamay: its record, its accuracy and the tokens llamay decoded."""
    out = tempfile.mkdtemp(prefix="scoring-bench-out-")
    record_path = os.path.join(out, "record.json")
    model_args = (f"model={model},base_url=http://127.0.0.1:{port}/v1/completions,tokenizer_backend=remote,"
                  f"tokenized_requests=True,num_concurrent={args.concurrent},max_retries=1,max_length={args.context}")
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "SCORING_BENCH_RECORD": record_path, "SCORING_BENCH_COLD": "1" if cold else "0"}
    before = llamay_counters(port, model)
    run = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--lm-eval-child", "--model", "local-completions",
         "--model_args", model_args, "--tasks", "scoring_bench", "--include_path", task_dir, "--output_path", out],
        env=env, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"lm-eval failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}")
    after = llamay_counters(port, model)
    with open(record_path) as f:
        record = json.load(f)
    results_file = next(os.path.join(d, n) for d, _, names in os.walk(out) for n in names if n.startswith("results_"))
    with open(results_file) as f:
        accuracy = json.load(f)["results"]["scoring_bench"]["acc,none"]
    decoded = (after[0] - before[0]) - (after[1] - before[1])
    return {"record": record, "accuracy": accuracy, "decoded": decoded, "seconds": record["seconds"]}


def ideal_tokens(prompts):
    """Each distinct prefix once: the size of the token trie of all prompts."""
    ordered = sorted(tuple(p) for p in prompts)
    total, previous = 0, ()
    for prompt in ordered:
        shared = 0
        while shared < min(len(prompt), len(previous)) and prompt[shared] == previous[shared]:
            shared += 1
        total += len(prompt) - shared
        previous = prompt
    return total


def gbnf_literal(text):
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'root ::= "{escaped}"'


def detokenize(port, model, tokens):
    status, raw = request_json(port, "POST", "/detokenize", {"model": model, "tokens": tokens})
    if status != 200:
        raise SystemExit(f"/detokenize: HTTP {status}: {raw[:300]!r}")
    return json.loads(raw)["prompt"]


def forced_continuation(port, model, context, continuation):
    """llama-server's log-probability of `continuation` (text) forced after `context` (token ids),
    with the prompt tokens it decoded and the choice tokens it generated."""
    body = {"model": model, "prompt": context, "grammar": gbnf_literal(continuation), "max_tokens": 64,
            "temperature": 0, "logprobs": 1}
    status, raw = request_json(port, "POST", "/v1/completions", body)
    if status != 200:
        raise SystemExit(f"llama-server: HTTP {status}: {raw[:300]!r}")
    answer = json.loads(raw)
    choice = answer["choices"][0]
    entries = choice["logprobs"]["content"]
    spelled, logprob, used = "", 0.0, 0
    for entry in entries:
        if spelled == continuation:
            break
        spelled += entry["token"]
        logprob += entry["logprob"]
        used += 1
    if spelled != continuation:
        raise SystemExit(f"llama-server spelled {spelled!r}, not the forced {continuation!r}")
    timings = answer.get("timings", {})
    return logprob, timings.get("prompt_n", len(context)), used


def llama_server_run(args, port, llamay_port, model, requests):
    """Run 1's requests replayed on llama-server as forced continuations, in lm-eval's order."""
    texts = [detokenize(llamay_port, model, r["tokens"][r["ctxlen"]:]) for r in requests]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.concurrent) as pool:
        results = list(pool.map(lambda rt: forced_continuation(port, model, rt[0]["tokens"][:rt[0]["ctxlen"]], rt[1]),
                                zip(requests, texts)))
    seconds = time.perf_counter() - started
    # Each forced choice token but the last is decoded to give the next one's distribution; the
    # row after the last one samples the end of the grammar, which is decoded too.
    decoded = sum(prompt_n + used for _, prompt_n, used in results)
    return {"logprobs": [r[0] for r in results], "decoded": decoded, "seconds": seconds}


def sent_positions(requests):
    """Per context (item): the positions, in lm-eval's order of requests, of its choices."""
    positions = {}
    for index, request in enumerate(requests):
        positions.setdefault(tuple(request["tokens"][:request["ctxlen"]]), []).append(index)
    return positions


def item_argmax(requests, logprobs):
    """Per context (item): the position of its highest-scored choice."""
    return {key: max(indices, key=lambda i: logprobs[i]) for key, indices in sent_positions(requests).items()}


def main():
    if "--lm-eval-child" in sys.argv:
        sys.argv.remove("--lm-eval-child")
        run_lm_eval_child()
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2:135m,gemma3:270m")
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--shots", type=int, default=None,
                        help="few-shot examples (default: about 300 tokens, 10 for text and 6 for letters)")
    parser.add_argument("--style", default="text,letters", help="text, letters or both")
    parser.add_argument("--ways", default="reuse,cold,llama-server")
    parser.add_argument("--concurrent", type=int, default=4, help="lm-eval's num_concurrent (and the replay's)")
    add_server_arguments(parser, context=2048)
    args = parser.parse_args()
    ways = args.ways.split(",")
    llama_server = find_llama_server(args.llama_server) if "llama-server" in ways else None
    print(f"{args.items} items x 4 choices, lm-eval num_concurrent {args.concurrent}, threads "
          f"{args.threads}, slots {args.parallel}\nllamay: {args.llamay}\nllama-server: {llama_server}\n", flush=True)
    rows, goals, notes = [], [], []
    for model in args.models.split(","):
        gguf = gguf_path(args.llamay, model)
        for style in args.style.split(","):
            task_dir = tempfile.mkdtemp(prefix="scoring-bench-task-")
            write_task(task_dir, args.items, style, args.shots or SHOTS[style])
            llamay = start("llamay", args, gguf, llama_server, model)
            try:
                # Warm-up: the model loads, and lm-eval's first import is paid outside the runs.
                request_json(llamay.port, "POST", "/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 1})
                results = {}
                # Reuse first, on a fresh daemon: nothing of the task is in its sequences yet.
                for way in [w for w in ("reuse", "cold") if w in ways or w == "reuse"]:
                    results[way] = lm_eval_run(args, llamay.port, model, task_dir, cold=way == "cold")
                    print(f"{model} {style} {way}: {results[way]['decoded']} tokens decoded, "
                          f"{results[way]['seconds']:.1f} s, acc {results[way]['accuracy']:.2f}", flush=True)
                    settle(llamay)
                requests = results["reuse"]["record"]["requests"]
                if "llama-server" in ways:
                    server = start("llama-server", args, gguf, llama_server, model)
                    try:
                        forced_continuation(server.port, model, requests[0]["tokens"][:4], "a")
                        results["llama-server"] = llama_server_run(args, server.port, llamay.port, model, requests)
                    finally:
                        server.stop()
            finally:
                llamay.stop()
            rows += report(model, style, args.items, requests, results, goals, notes)
            print("\n".join(rows[-len(results):]), flush=True)
    print("\n| model | style | way | tokens requested | ideal | tokens decoded | decoded/ideal | s/item | acc | vs no reuse |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    for line in notes:
        print(f"  {line}")
    for met, line in goals:
        print(f"  [{'met' if met else 'NOT met'}] {line}")


def report(model, style, items, requests, results, goals, notes):
    prompts = [r["tokens"] for r in requests]
    requested = sum(len(p) for p in prompts)
    ideal = ideal_tokens(prompts)
    reuse_logprobs = [r["logprob"] for r in requests]
    picks = item_argmax(requests, reuse_logprobs)
    rows = []
    names = {"reuse": "1. lm-eval, llamay", "cold": "2. lm-eval, llamay cache_prompt false",
             "llama-server": "3. llama-server, forced continuations (no echo)"}
    for way in ("reuse", "cold", "llama-server"):
        if way not in results:
            continue
        result = results[way]
        per_item = result["seconds"] / items
        if way == "llama-server":
            theirs = item_argmax(requests, result["logprobs"])
            worst = max(abs(a - b) for a, b in zip(result["logprobs"], reuse_logprobs))
            accuracy = f"{sum(theirs[k] == picks[k] for k in picks)}/{len(picks)} argmax as 1; worst |diff| {worst:.2f} nats"
        else:
            accuracy = f"{result['accuracy']:.2f}"
        versus = f"{per_item / (results['cold']['seconds'] / items):.2f}x" if "cold" in results else "-"
        rows.append(f"| {model} | {style} | {names[way]} | {requested} | {ideal} | {result['decoded']} | "
                    f"{result['decoded'] / ideal:.2f}x | {per_item:.3f} | {accuracy} | {versus} |")
    spans = sorted(max(p) - min(p) for p in sent_positions(requests).values())
    notes.append(f"{model} {style}: lm-eval sent an item's choices a median of {statistics.median(spans):.0f} requests "
                 f"apart (first to last, at most {spans[-1]}; {sum(s <= 3 for s in spans)} of {len(spans)} items "
                 "as four requests in a row)")
    reuse = results["reuse"]
    goals.append((reuse["decoded"] <= 1.1 * ideal,
                  f"{model} {style}: decoded tokens <= 1.1x ideal: {reuse['decoded']} of {ideal} ({reuse['decoded'] / ideal:.2f}x)"))
    if "cold" in results:
        ratio = reuse["seconds"] / results["cold"]["seconds"]
        goals.append((ratio <= 0.35, f"{model} {style}: time per item <= 0.35x without reuse: {ratio:.2f}x"))
    return rows


if __name__ == "__main__":
    main()
