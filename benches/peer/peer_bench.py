#!/usr/bin/env python3
"""Peer bench: llamay against llama.cpp's own llama-server, side by side, on the same GGUF file,
with the same threads and slots, driven by the same streaming chat requests.

    benches/peer/peer_bench.py [--models smollm2:135m,gemma3:270m] [--rounds 2]

For each model it starts both servers and, in every round, runs each scenario on one server and
then at once on the other (the order alternates between scenarios and rounds). A shared machine's
speed drifts by 20% or more within minutes; paired runs seconds apart see the same drift, where a
round per server let it land on one side only. Between runs the bench waits until the server that
just ran uses no CPU, so the resting server is idle and the two do not compete for the CPUs: its
CPU time during the other's scenarios is measured and printed with each round. `--sequential`
runs one server at a time instead (all scenarios, stop, then the other). Scenarios: 1 and 4
concurrent clients, greedy and sampled (temperature 0.7, top-k 40, top-p 0.95, min-p 0.05, the
same for both), streaming chat of --tokens tokens; and one client greedy with a JSON schema
(constrained/plain is that rate over the plain greedy rate of the same server). Then llamay's
per-token time split by phase, read from its `/v1/stats` around each scenario. In the paired mode,
last, --decode-requests non-streaming generations from one raw prompt on each server compare the
per-token step alone, as each server times it (prefill and chat template left out). With
--profile-runs N, each server then runs the four-client greedy scenario N times under `perf record`
and both CPU splits are printed side by side (perf_split.py's buckets).

tok/s is generated tokens over the wall time of the level (4 clients: the aggregate); TTFT is from
sending the request to the first chunk carrying text. Ratios are llamay / llama-server (higher is
better for tok/s, lower is better for TTFT). Every round's numbers are printed, then the median
over rounds and (paired mode) each round's tok/s ratios, so the noise of a shared machine stays
visible.

llama-server comes from --llama-server, else $LLAMA_SERVER, else it is built once by
benches/peer/build-llama-server.sh into $LLAMA_SERVER_CACHE (default ~/.cache/llamay-peer).
Standard library only; run by hand, not in CI. Both servers listen on loopback only.
"""

import argparse
import http.client
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import perf_split

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = [
    "Write a story about a lighthouse keeper who finds a map.",
    "Explain how a bicycle gear system works, step by step.",
    "Describe a walk through a busy market in the morning.",
    "Write a letter from a sailor to their family at home.",
]
SAMPLED = {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
GREEDY = {"temperature": 0.0}
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "characters": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "age": {"type": "integer"}, "role": {"type": "string"}},
            "required": ["name", "age", "role"]}},
        "summary": {"type": "string"},
    },
    "required": ["title", "characters", "summary"],
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llamay_home():
    return os.environ.get("LLAMAY_HOME") or os.path.join(os.path.expanduser("~"), ".llamay")


def gguf_path(llamay_bin, model):
    """The blob a store name resolves to, read from `llamay show` (digest) and the store layout."""
    shown = subprocess.run([llamay_bin, "show", model], capture_output=True, text=True, check=True).stdout
    for line in shown.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "digest":
            hex_digest = parts[1].split(":", 1)[-1]
            path = os.path.join(llamay_home(), "blobs", f"sha256-{hex_digest}")
            if os.path.isfile(path):
                return path
            raise SystemExit(f"{model}: blob {path} is missing")
    raise SystemExit(f"{model}: `llamay show` printed no digest:\n{shown}")


def find_llama_server(explicit):
    if explicit:
        return explicit
    if os.environ.get("LLAMA_SERVER"):
        return os.environ["LLAMA_SERVER"]
    script = os.path.join(ROOT, "benches", "peer", "build-llama-server.sh")
    built = subprocess.run([script], stdout=subprocess.PIPE, text=True, check=True).stdout
    return built.strip().splitlines()[-1]


class Server:
    """One server process on a free loopback port; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name, argv_for_port, env=None):
        self.name = name
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix=f"peer-{name}-", suffix=".log", delete=False)
        self.process = subprocess.Popen(argv_for_port(self.port), stdout=self.log, stderr=subprocess.STDOUT,
                                        env={**os.environ, **(env or {})})
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{name} exited while starting; log: {self.log.name}")
            try:
                status, _ = request_json(self.port, "GET", "/health", None, timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise SystemExit(f"{name} did not answer /health within 180 s; log: {self.log.name}")

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def request_json(port, method, path, body, timeout=600):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=None if body is None else json.dumps(body),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


REQUEST_NUMBER = itertools.count(1)
# Set from --same-prompts: repeat the four prompts verbatim, so a server's prompt cache can skip
# their prefill (llama-server keeps each slot's last prompt); by default every request's text is
# new after the chat template's own prefix, so TTFT measures prefill.
SAME_PROMPTS = False


def stream_chat(port, model, index, tokens, sampling, schema=None):
    """One streaming chat request: (seconds to first text, total seconds, generated tokens)."""
    text = PROMPTS[index % len(PROMPTS)]
    if not SAME_PROMPTS:
        text = f"Request {next(REQUEST_NUMBER)}. {text}"
    body = {
        "model": model, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": tokens,
        "seed": index, "messages": [{"role": "user", "content": text}], **sampling,
    }
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "story", "schema": schema}}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    first, chunks, usage = None, 0, None
    try:
        connection.request("POST", "/v1/chat/completions", body=json.dumps(body),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
        while True:
            line = response.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                chunks += 1
                if first is None:
                    first = time.perf_counter() - started
            if chunk.get("usage"):
                usage = chunk["usage"].get("completion_tokens")
    finally:
        connection.close()
    total = time.perf_counter() - started
    return (first if first is not None else total), total, (usage if usage is not None else chunks)


PHASES = ("decode", "sampling", "constraint", "detokenize", "deliver")


def step_seconds(port, model):
    """llamay's decode-step time by phase so far (`/v1/stats`), or None from a server without it."""
    try:
        status, body = request_json(port, "GET", "/v1/stats", None, timeout=10)
    except OSError:
        return None
    if status != 200:
        return None
    for entry in json.loads(body).get("models", []):
        if entry.get("name") == model:
            return entry.get("totals", {}).get("step_seconds")
    return None


def run_level(port, model, clients, requests_per_client, tokens, sampling, schema=None):
    steps_before = step_seconds(port, model)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        jobs = [pool.submit(stream_chat, port, model, c * 100 + r, tokens, sampling, schema)
                for c in range(clients) for r in range(requests_per_client)]
        results = [job.result() for job in jobs]
    wall = time.perf_counter() - started
    ttfts = sorted(r[0] for r in results)
    generated = sum(r[2] for r in results)
    out = {"tok_s": generated / wall, "ttft_p50": statistics.median(ttfts),
           "ttft_p99": ttfts[min(len(ttfts) - 1, round(0.99 * (len(ttfts) - 1)))], "tokens": generated}
    steps_after = step_seconds(port, model)
    if steps_before is not None and steps_after is not None and generated:
        # Milliseconds per generated token: each phase, the loop's bookkeeping (steps beyond the
        # phases), and the wall time outside the model's steps (HTTP, parsing, templating,
        # tokenizing, waking the worker); the columns add up to the wall time per token.
        spent = {k: (steps_after[k] - steps_before[k]) * 1000 / generated for k in (*PHASES, "steps")}
        split = {k: spent[k] for k in PHASES}
        split["loop"] = spent["steps"] - sum(split.values())
        split["outside steps"] = wall * 1000 / generated - spent["steps"]
        out["split"] = split
    return out


def plan():
    """The scenarios in the order they run: (key, clients, sampling, schema)."""
    levels = [((mode, clients), clients, sampling, None)
              for mode, sampling in (("greedy", GREEDY), ("sampled", SAMPLED)) for clients in (1, 4)]
    return levels + [("constrained", 1, GREEDY, SCHEMA)]


def warm_up(port, model):
    stream_chat(port, model, 0, 8, GREEDY)  # load, first allocation


def with_ratio(out):
    out["constrained/plain"] = out["constrained"]["tok_s"] / out[("greedy", 1)]["tok_s"]
    return out


def measure(port, model, args):
    """Every scenario against one running server."""
    warm_up(port, model)
    return with_ratio({key: run_level(port, model, clients, args.requests, args.tokens, sampling, schema)
                       for key, clients, sampling, schema in plan()})


def cpu_seconds(pid):
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(server, quiet=0.2, limit=5.0):
    """Waits until `server` has used no CPU for `quiet` seconds (at most `limit`): after its last
    decode, ggml's worker threads poll for new work for a while (about 0.25 s of a core here)."""
    deadline = time.perf_counter() + limit
    last = cpu_seconds(server.process.pid)
    while time.perf_counter() < deadline:
        time.sleep(quiet)
        now = cpu_seconds(server.process.pid)
        if now == last:
            return
        last = now


def measure_paired(servers, model, args, round_index):
    """Each scenario on both running servers back to back. Returns each server's results and its
    CPU seconds per wall second while the other ran its scenarios (near 0 when idle)."""
    names = list(servers)
    out = {name: {} for name in names}
    rest_cpu, rest_wall = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
    for index, (key, clients, sampling, schema) in enumerate(plan()):
        order = names if (round_index + index) % 2 == 0 else names[::-1]
        for name in order:
            resting = order[1] if name == order[0] else order[0]
            cpu_before, started = cpu_seconds(servers[resting].process.pid), time.perf_counter()
            out[name][key] = run_level(servers[name].port, model, clients, args.requests, args.tokens,
                                       sampling, schema)
            rest_wall[resting] += time.perf_counter() - started
            rest_cpu[resting] += cpu_seconds(servers[resting].process.pid) - cpu_before
            settle(servers[name])
    return {name: with_ratio(r) for name, r in out.items()}, {n: rest_cpu[n] / rest_wall[n] for n in names}


RAW_PROMPT = "Once upon a time, in a lighthouse by the sea, there lived a keeper who"


def generation_ms_per_token(which, port, model, index, tokens):
    """One greedy, non-streaming generation from the same raw prompt (no chat template), timed by
    the server itself with the prompt's prefill left out: llama-server's
    `timings.predicted_per_token_ms`, llamay's Ollama `eval_duration / eval_count`."""
    prompt = f"Request {index}. {RAW_PROMPT}"
    if which == "llama-server":
        path, body = "/completion", {"prompt": prompt, "n_predict": tokens, "temperature": 0}
    else:
        path, body = "/api/generate", {"model": model, "prompt": prompt, "raw": True, "stream": False,
                                       "options": {"num_predict": tokens, "temperature": 0}}
    status, reply = request_json(port, "POST", path, body)
    if status != 200:
        raise RuntimeError(f"{which} {path}: HTTP {status}: {reply[:300]!r}")
    reply = json.loads(reply)
    if which == "llama-server":
        return reply["timings"]["predicted_per_token_ms"]
    return reply["eval_duration"] / 1e6 / max(reply["eval_count"], 1)


def measure_generation(servers, model, args):
    """Median generation ms/token of each server over --decode-requests paired requests (order
    alternating). The streaming scenarios include each prompt's prefill and the chat template;
    this isolates the per-token step, which is where the two llama.cpp builds would differ."""
    times = {name: [] for name in servers}
    names = list(servers)
    for index in range(args.decode_requests):
        for name in names if index % 2 == 0 else names[::-1]:
            times[name].append(generation_ms_per_token(name, servers[name].port, model, index, args.tokens))
            settle(servers[name])
    return {name: statistics.median(values) for name, values in times.items()}


def profile(servers, model, args):
    """Each server's CPU time by bucket (perf_split's) while it runs --profile-runs of the four-client
    greedy scenario under `perf record`, one server after the other: the split the two servers
    spend a batched step on, side by side."""
    shares, tops, rates = {}, {}, {}
    for name, server in servers.items():
        handle, data = tempfile.mkstemp(prefix=f"peer-{name}-", suffix=".perf")
        os.close(handle)
        try:
            recorder = subprocess.Popen(["perf", "record", "-q", "-p", str(server.process.pid), "-o", data],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                rates[name] = [run_level(server.port, model, 4, args.requests, args.tokens, GREEDY)["tok_s"]
                               for _ in range(args.profile_runs)]
            finally:
                recorder.send_signal(signal.SIGINT)
                recorder.wait()
            shares[name], tops[name] = perf_split.split(data)
        finally:
            os.unlink(data)
        settle(server)
    names = list(servers)
    print("CPU time by bucket under perf, four clients greedy (perf's own sampling slows both):\n")
    print("| bucket | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    buckets = sorted({b for s in shares.values() for b in s}, key=lambda b: -shares[names[0]].get(b, 0))
    for bucket in buckets:
        print(f"| {bucket} | " + " | ".join(f"{shares[n].get(bucket, 0):.1f}%" for n in names) + " |")
    for name in names:
        hottest = ", ".join(f"{symbol.split('] ', 1)[-1].strip()[:40]} {percent:.1f}%"
                            for percent, _, symbol, _ in tops[name][:5])
        print(f"\n{name}, tok/s under perf " + "/".join(f"{r:.1f}" for r in rates[name]) + f"; hottest: {hottest}")
    print()


def add_server_arguments(parser, context, llama_server_flags=""):
    """The flags `start` reads: threads, slots and context per sequence for both servers, and
    each server's binary and extra flags."""
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--context", type=int, default=context, help="context per sequence (both servers)")
    parser.add_argument("--llamay", default=os.path.join(ROOT, "target", "release", "llamay"))
    parser.add_argument("--llamay-flags", default="", help="more `llamay serve` flags, e.g. \"-kv f32\"")
    parser.add_argument("--llama-server", default=None)
    parser.add_argument("--llama-server-flags", default=llama_server_flags)


def start(which, args, gguf, llama_server, model):
    if which == "llama-server":
        argv = lambda port: [llama_server, "-m", gguf, "--host", "127.0.0.1", "--port", str(port),
                             "-t", str(args.threads), "-tb", str(args.threads), "-np", str(args.parallel),
                             "-c", str(args.context * args.parallel), "--no-webui",
                             *args.llama_server_flags.split()]
        return Server(which, argv)
    argv = lambda port: [args.llamay, "serve", "-m", model, "-addr", f"127.0.0.1:{port}", "-t", str(args.threads),
                         "-parallel", str(args.parallel), "-c", str(args.context), "-max-loaded", "1",
                         "-keepalive", "-1", *args.llamay_flags.split()]
    return Server(which, argv, env={"RUST_LOG": "warn"})


def fmt_row(name, r):
    cells = [name]
    for mode in ("greedy", "sampled"):
        one, four = r[(mode, 1)], r[(mode, 4)]
        cells += [f"{one['tok_s']:.1f}", f"{one['ttft_p50'] * 1000:.0f}/{one['ttft_p99'] * 1000:.0f}",
                  f"{four['tok_s']:.1f}", f"{four['ttft_p50'] * 1000:.0f}/{four['ttft_p99'] * 1000:.0f}"]
    cells.append(f"{r['constrained/plain']:.2f}")
    return "| " + " | ".join(cells) + " |"


HEADER = ("| server | greedy 1c tok/s | TTFT p50/p99 ms | greedy 4c tok/s | TTFT p50/p99 ms "
          "| sampled 1c tok/s | TTFT p50/p99 ms | sampled 4c tok/s | TTFT p50/p99 ms | constrained/plain |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


SPLIT_COLUMNS = (*PHASES, "loop", "outside steps")


def scenarios(result):
    """The scenario keys of one server's result, in the order they ran."""
    return [key for key, *_ in plan() if key in result]


def print_split(results):
    """llamay's per-token time by phase, each scenario's median over rounds."""
    print("llamay, ms per generated token (1c: one client; 4c: four, steps shared by the batch):\n")
    print("| scenario | wall | " + " | ".join(SPLIT_COLUMNS) + " |")
    print("|---" * (len(SPLIT_COLUMNS) + 2) + "|")
    for key in scenarios(results[0]):
        if not all("split" in r[key] for r in results):
            continue
        name = key if isinstance(key, str) else f"{key[0]} {key[1]}c"
        wall = statistics.median(1000 / r[key]["tok_s"] for r in results)
        cells = [f"{statistics.median(r[key]['split'][c] for r in results):.2f}" for c in SPLIT_COLUMNS]
        print(f"| {name} | {wall:.2f} | " + " | ".join(cells) + " |")
    print()


def median_result(results):
    out = {}
    for key in scenarios(results[0]):
        out[key] = {f: statistics.median(r[key][f] for r in results) for f in ("tok_s", "ttft_p50", "ttft_p99")}
    out["constrained/plain"] = statistics.median(r["constrained/plain"] for r in results)
    return out


def ratio_row(ours, theirs):
    cells = ["llamay / llama-server"]
    for mode in ("greedy", "sampled"):
        for clients in (1, 4):
            a, b = ours[(mode, clients)], theirs[(mode, clients)]
            cells += [f"{a['tok_s'] / b['tok_s']:.2f}x", f"{a['ttft_p50'] / b['ttft_p50']:.2f}x"]
    cells.append(f"{ours['constrained/plain'] / theirs['constrained/plain']:.2f}x")
    return "| " + " | ".join(cells) + " |"


def paired_ratios(results):
    """Each round's tok/s ratio per scenario: in the paired mode both sides of one ratio ran
    seconds apart, so its spread over rounds is the bench's own noise."""
    cells = []
    for mode in ("greedy", "sampled"):
        for clients in (1, 4):
            ratios = [a[(mode, clients)]["tok_s"] / b[(mode, clients)]["tok_s"]
                      for a, b in zip(results["llamay"], results["llama-server"])]
            cells.append(f"{mode} {clients}c " + "/".join(f"{r:.2f}" for r in ratios))
    return "Each round's tok/s ratio: " + ", ".join(cells)


def goals(ours, theirs):
    lines = []
    for mode in ("greedy", "sampled"):
        r = ours[(mode, 1)]["tok_s"] / theirs[(mode, 1)]["tok_s"]
        lines.append((f"1 client {mode} tok/s >= 1.0x", r >= 1.0, f"{r:.2f}x"))
    for mode in ("greedy", "sampled"):
        r = ours[(mode, 4)]["tok_s"] / theirs[(mode, 4)]["tok_s"]
        lines.append((f"4 clients {mode} tok/s >= 1.1x", r >= 1.1, f"{r:.2f}x"))
        a, b = ours[(mode, 4)]["ttft_p50"], theirs[(mode, 4)]["ttft_p50"]
        lines.append((f"4 clients {mode} TTFT p50 <= llama-server's", a <= b, f"{a * 1000:.0f} vs {b * 1000:.0f} ms"))
    c = ours["constrained/plain"]
    lines.append(("constrained/plain >= 0.92", c >= 0.92, f"{c:.2f}"))
    return lines


def print_round(model, round_index, which, r, note):
    tokens = "/".join(str(r[k]["tokens"]) for k in scenarios(r))
    print(f"  {model} round {round_index + 1}: {fmt_row(which, r)} {note}, tokens {tokens}", flush=True)


def run_sequential(args, gguf, llama_server, model, results):
    for round_index in range(args.rounds):
        order = ["llama-server", "llamay"] if round_index % 2 == 0 else ["llamay", "llama-server"]
        for which in order:
            load_before = os.getloadavg()[0]
            server = start(which, args, gguf, llama_server, model)
            try:
                results[which].append(measure(server.port, model, args))
            finally:
                server.stop()
            # The machine is shared: the 1-minute load average before and after each server's
            # scenarios says how much the other processes may have skewed its numbers.
            print_round(model, round_index, which, results[which][-1],
                        f"load {load_before:.1f} -> {os.getloadavg()[0]:.1f}")


def run_paired(args, gguf, llama_server, model, results):
    servers = {}
    try:
        for which in results:
            servers[which] = start(which, args, gguf, llama_server, model)
            warm_up(servers[which].port, model)
            settle(servers[which])
        for round_index in range(args.rounds):
            load_before = os.getloadavg()[0]
            paired, rest_cpu = measure_paired(servers, model, args, round_index)
            for which, r in paired.items():
                results[which].append(r)
                print_round(model, round_index, which, r, f"load {load_before:.1f} -> {os.getloadavg()[0]:.1f}, "
                            f"{rest_cpu[which] * 100:.1f}% of a core while resting")
        generation = measure_generation(servers, model, args) if args.decode_requests else None
        if args.profile_runs:
            profile(servers, model, args)
        return generation
    finally:
        for server in servers.values():
            server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2:135m,gemma3:270m")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per model (each server in each)")
    parser.add_argument("--requests", type=int, default=2, help="requests per client at each level")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--context", type=int, default=4096, help="context per sequence (both servers)")
    parser.add_argument("--llamay", default=os.path.join(ROOT, "target", "release", "llamay"))
    parser.add_argument("--llamay-flags", default="", help="more `llamay serve` flags, e.g. \"-kv f32\"")
    parser.add_argument("--llama-server", default=None)
    parser.add_argument("--llama-server-flags", default="",
                        help="more llama-server flags")
    parser.add_argument("--decode-requests", type=int, default=6,
                        help="paired non-streaming requests timing generation alone (0: skip)")
    parser.add_argument("--profile-runs", type=int, default=0,
                        help="after the rounds, run the four-client greedy scenario this many times on each "
                             "server under `perf record` and print both CPU splits (needs perf; 0: skip)")
    parser.add_argument("--sequential", action="store_true",
                        help="one server at a time: all scenarios on one, stop it, then the other")
    parser.add_argument("--same-prompts", action="store_true",
                        help="repeat the prompts verbatim (lets llama-server's prompt cache skip prefill)")
    args = parser.parse_args()
    global SAME_PROMPTS
    SAME_PROMPTS = args.same_prompts
    if args.profile_runs and (args.sequential or not shutil.which("perf")):
        raise SystemExit("--profile-runs needs perf (apt-get install linux-perf) and the paired mode")
    if not os.access(args.llamay, os.X_OK):
        raise SystemExit(f"{args.llamay} is not built (cargo build --release)")
    llama_server = find_llama_server(args.llama_server)
    if not (os.access(llama_server, os.X_OK) or shutil.which(llama_server)):
        raise SystemExit(f"llama-server not found at {llama_server}")
    print(f"llama-server: {llama_server} {args.llama_server_flags}\nllamay: {args.llamay} {args.llamay_flags}")
    print(f"threads {args.threads}, slots {args.parallel}, context {args.context} per slot, "
          f"{args.requests} requests per client, max_tokens {args.tokens}, {args.rounds} rounds, "
          f"{'repeated' if args.same_prompts else 'unique'} prompts, "
          f"{'one server at a time' if args.sequential else 'both servers up, each scenario paired'}\n")
    for model in args.models.split(","):
        gguf = gguf_path(args.llamay, model)
        results = {"llamay": [], "llama-server": []}
        generation = None
        if args.sequential:
            run_sequential(args, gguf, llama_server, model, results)
        else:
            generation = run_paired(args, gguf, llama_server, model, results)
        ours, theirs = median_result(results["llamay"]), median_result(results["llama-server"])
        print(f"\n### {model} ({os.path.basename(gguf)[:19]}), median of {args.rounds} rounds\n")
        print(HEADER)
        print(fmt_row("llama-server", theirs))
        print(fmt_row("llamay", ours))
        print(ratio_row(ours, theirs) + "  (tok/s and TTFT p50 ratios)")
        print()
        if not args.sequential:
            print(paired_ratios(results) + "\n")
        for name, met, value in goals(ours, theirs):
            print(f"  [{'met' if met else 'NOT met'}] {name}: {value}")
        print()
        if generation:
            ours_ms, theirs_ms = generation["llamay"], generation["llama-server"]
            print(f"Generation alone (same raw prompt, greedy, prefill excluded, each server's own timing, "
                  f"median of {args.decode_requests}): llama-server {theirs_ms:.2f} ms/token, llamay "
                  f"{ours_ms:.2f} ms/token, speed ratio {theirs_ms / ours_ms:.2f}x\n")
        print_split(results["llamay"])
        print(flush=True)


if __name__ == "__main__":
    main()
