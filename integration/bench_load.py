"""Load benchmark: aggregate generated tok/s with 1, 2, 4 and 8 concurrent streaming clients, and
time to first token p50/p99, printed as a table. Continuous batching should give > 1.5x the
single-client throughput at 4 clients.

    integration/run.sh --bench                  (starts the daemon)
    LLAMAY_URL=http://127.0.0.1:11435 python integration/bench_load.py [--requests 4] [--tokens 96]
"""

import argparse
import concurrent.futures
import json
import os
import statistics
import time

import requests

BASE = os.environ.get("LLAMAY_URL", "http://127.0.0.1:11435")
MODEL = os.environ.get("LLAMAY_MODEL", "smollm2:135m")
PROMPTS = [
    "Write a story about a lighthouse keeper who finds a map.",
    "Explain how a bicycle gear system works, step by step.",
    "Describe a walk through a busy market in the morning.",
    "Write a letter from a sailor to their family at home.",
]


def one_request(index, tokens):
    body = {
        "model": MODEL, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": tokens,
        "temperature": 0.7, "seed": index,
        "messages": [{"role": "user", "content": PROMPTS[index % len(PROMPTS)]}],
    }
    started = time.perf_counter()
    first, generated = None, 0
    with requests.post(f"{BASE}/v1/chat/completions", json=body, stream=True, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[len(b"data: "):])
            if first is None and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - started
            if chunk.get("usage"):
                generated = chunk["usage"]["completion_tokens"]
    return first if first is not None else time.perf_counter() - started, generated


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def run_level(clients, requests_per_client, tokens):
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=clients) as pool:
        jobs = [pool.submit(one_request, c * 1000 + r, tokens) for c in range(clients) for r in range(requests_per_client)]
        results = [job.result() for job in jobs]
    wall = time.perf_counter() - started
    ttfts = [r[0] for r in results]
    generated = sum(r[1] for r in results)
    return {"clients": clients, "requests": len(results), "tokens": generated, "wall": wall,
            "tok_s": generated / wall, "ttft_p50": statistics.median(ttfts), "ttft_p99": percentile(ttfts, 0.99)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=4, help="requests per client at each level")
    parser.add_argument("--tokens", type=int, default=96, help="max_tokens per request")
    parser.add_argument("--levels", default="1,2,4,8")
    args = parser.parse_args()
    one_request(0, 4)  # load the model outside the measurement
    rows = [run_level(int(level), args.requests, args.tokens) for level in args.levels.split(",")]
    base = rows[0]["tok_s"] or 1.0
    print(f"model {MODEL}, {args.requests} requests per client, max_tokens {args.tokens}")
    print(f"{'clients':>7} {'requests':>8} {'tokens':>7} {'wall s':>7} {'tok/s':>8} {'speedup':>7} {'TTFT p50':>9} {'TTFT p99':>9}")
    for row in rows:
        print(f"{row['clients']:>7} {row['requests']:>8} {row['tokens']:>7} {row['wall']:>7.2f} {row['tok_s']:>8.1f} "
              f"{row['tok_s'] / base:>6.2f}x {row['ttft_p50'] * 1000:>7.0f}ms {row['ttft_p99'] * 1000:>7.0f}ms")


if __name__ == "__main__":
    main()
