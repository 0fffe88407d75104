#!/usr/bin/env python3
"""Soak test (not in CI): 16 clients drive the real daemon for N minutes across every route, with
streaming, disconnects mid-stream, bad bodies and model switches, then a report: requests,
statuses by route, p50/p99 latency, the daemon's RSS after warm-up and at the end, and sequences
still in use at the end.

    integration/soak.py [--minutes 10] [--clients 16] [--warmup 60] [--seed 1]

It starts `llamay serve` itself on a free loopback port (LLAMAY_BIN, default target/release/llamay;
models from LLAMAY_HOME) or attaches to LLAMAY_URL (RSS then comes from /metrics). Models:
LLAMAY_MODEL (smollm2:135m) and LLAMAY_OTHER_MODEL (gemma3:270m), with -max-loaded 1 so a switch
evicts. Warm-up first sends every route, constraint kind and bad body once for both models, then
runs the random load for --warmup seconds. RSS is read at the same quiet point before and after
(clients paused, in-flight work done, the main model loaded and one request answered), so the
figure compares like with like; it is split into anonymous memory (heap, KV cache) and
file-backed memory (the mmapped model, which a model switch changes).

Hanging up mid-stream is the script's own doing and counts as a "disconnect" request; an error
is what the daemon did to a request sent whole (a connection it dropped, named with the
request's kind and route), and since every body goes out at once, a 408 is a fault too.

Goal, checked at the end (exit status 1 if missed): no 5xx other than 503, no 408, no client
errors, RSS growth under 10% after warm-up, 0 sequences in use.
"""

import argparse
import collections
import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import requests

REPO = pathlib.Path(__file__).resolve().parent.parent
MODEL = os.environ.get("LLAMAY_MODEL", "smollm2:135m")
OTHER_MODEL = os.environ.get("LLAMAY_OTHER_MODEL", "gemma3:270m")
TIMEOUT = 120


class Daemon:
    """The daemon under test: started here, or found at LLAMAY_URL."""

    def __init__(self):
        self.process = None
        self.log = None
        url = os.environ.get("LLAMAY_URL")
        if url:
            self.base = url.rstrip("/")
            return
        binary = os.environ.get("LLAMAY_BIN", str(REPO / "target/release/llamay"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix="llamay-soak-", suffix=".log", delete=False)
        flags = os.environ.get("LLAMAY_SERVE_FLAGS", "").split()
        self.process = subprocess.Popen(
            [binary, "serve", "-m", MODEL, "-addr", f"127.0.0.1:{port}", "-max-loaded", "1",
             "-keepalive", "5m", "-parallel", "4", *flags],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"},
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.process.poll() is not None:
                sys.exit(f"llamay exited during start-up; log: {self.log.name}")
            try:
                if requests.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        sys.exit(f"llamay did not answer /health; log: {self.log.name}")

    def rss_bytes(self):
        if self.process is not None:
            with open(f"/proc/{self.process.pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        text = requests.get(f"{self.base}/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith("process_resident_memory_bytes "):
                return int(float(line.split()[1]))
        return None

    def rss_split(self):
        """RssAnon and RssFile in bytes (mmapped model files count in RssFile), or None."""
        if self.process is None:
            return None
        split = {}
        with open(f"/proc/{self.process.pid}/smaps_rollup") as rollup:
            for line in rollup:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Anonymous", "Private_Clean", "Shared_Clean"):
                    split[key] = int(rest.split()[0]) * 1024
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("RssAnon", "RssFile", "Threads"):
                    split[key] = int(rest.split()[0]) * (1024 if key != "Threads" else 1)
        return split

    def sequences_in_use(self):
        stats = requests.get(f"{self.base}/v1/stats", timeout=10).json()
        return sum(m["sequences_in_use"] for m in stats["models"])

    def panicked(self):
        if self.log is None:
            return False
        return "panicked" in pathlib.Path(self.log.name).read_text(errors="replace")

    def stop(self):
        if self.process is None:
            return None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return "killed after 60 s"


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"]}
GRAMMAR = 'root ::= ("yes" | "no") " because " [a-z ]{1,20}'
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
                   "required": ["city"]}}}]


def model_for(rng):
    # Mostly the main model: every switch is an eviction and a load with -max-loaded 1.
    return OTHER_MODEL if rng.random() < 0.15 else MODEL


def openai_body(rng, stream):
    body = {"model": model_for(rng), "messages": [{"role": "user", "content": rng.choice(
        ["Say hi.", "Name a colour.", "Count to three.", "What is 2+2?"])}],
        "max_tokens": rng.randint(4, 24), "temperature": rng.choice([0, 0.7]), "stream": stream}
    extra = rng.random()
    if extra < 0.2:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}
    elif extra < 0.3:
        body["response_format"] = {"type": "json_object"}
    elif extra < 0.4:
        body["tools"] = TOOLS
        body["tool_choice"] = rng.choice(["auto", "required"])
    elif extra < 0.5:
        body["grammar"] = GRAMMAR
    if stream and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    return body


def anthropic_body(rng, stream):
    return {"model": model_for(rng), "max_tokens": rng.randint(4, 24), "stream": stream,
            "messages": [{"role": "user", "content": "Tell me a fact."}]}


def ollama_chat_body(rng, stream):
    body = {"model": model_for(rng), "stream": stream, "options": {"num_predict": rng.randint(4, 24)},
            "messages": [{"role": "user", "content": "Describe the sea."}]}
    if rng.random() < 0.3:
        body["format"] = SCHEMA
    return body


def ollama_generate_body(rng, stream):
    return {"model": model_for(rng), "stream": stream, "prompt": "Once upon a time",
            "options": {"num_predict": rng.randint(4, 24)}}


BAD_BODIES = [
    b"", b"{", b"[]", b"null", b'{"model": 5}', b'{"model": "smollm2:135m", "messages": "hi"}',
    b'{"model": "no-such-model:1b", "messages": [{"role": "user", "content": "x"}]}',
    b'{"model": "smollm2:135m", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}',
    b'{"model": "smollm2:135m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
    b'{"model": "smollm2:135m", "prompt": "\xff\xfe"}',
    b'{"model": "smollm2:135m", "messages": [{"role": "user", "content": "x"}], '
    b'"response_format": {"type": "json_schema", "json_schema": {"schema": {"if": {}}}}}',
    b'{"model": "smollm2:135m", "prompt": "x", "grammar": "root ::= ("}',
    b"[" * 5000 + b"]" * 5000,
]

# A prompt far over any context: tokenizing it is seconds of CPU for the daemon.
BIG_BODY = b'{"model": "smollm2:135m", "prompt": "' + b"x" * (3 << 20) + b'"}'

GENERATION_ROUTES = [
    ("/v1/chat/completions", openai_body, "sse"),
    ("/v1/messages", anthropic_body, "sse"),
    ("/api/chat", ollama_chat_body, "ndjson"),
    ("/api/generate", ollama_generate_body, "ndjson"),
]
READ_ROUTES = ["/v1/models", f"/v1/models/{MODEL}", "/api/tags", "/api/ps", "/api/version",
               "/v1/stats", "/metrics", "/health", "/"]


class Results:
    def __init__(self):
        self.lock = threading.Lock()
        self.statuses = collections.Counter()  # (route, status)
        self.latencies = collections.defaultdict(list)  # kind -> seconds
        self.errors = collections.Counter()  # what failed without a status
        self.server_errors = []  # (route, status, body) of 5xx other than 503

    def record(self, kind, route, status, seconds, body=b""):
        with self.lock:
            self.statuses[(route, status)] += 1
            self.latencies[kind].append(seconds)
            if status >= 500 and status != 503 and len(self.server_errors) < 20:
                self.server_errors.append((route, status, body[:300]))

    def error(self, what):
        with self.lock:
            self.errors[what] += 1


def one_request(session, base, rng, results, current):
    """One random request; `current` names it (kind, route) for an error to be classified by."""
    roll = rng.random()
    if roll < 0.55:
        route, make, framing = rng.choice(GENERATION_ROUTES)
        stream = rng.random() < 0.5
        disconnect = stream and rng.random() < 0.3
        body = make(rng, stream)
        kind = "disconnect" if disconnect else ("stream" if stream else "generate")
        current.update(kind=kind, route=route)
        started = time.monotonic()
        with session.post(f"{base}{route}", json=body, stream=stream, timeout=TIMEOUT) as response:
            if disconnect and response.status_code == 200:
                for _ in response.iter_lines():
                    break  # the first frame, then hang up mid-stream
                response.close()
                results.record(kind, route, response.status_code, time.monotonic() - started)
                return
            content = response.content
            results.record(kind, route, response.status_code, time.monotonic() - started, content)
            if response.status_code == 200 and stream:
                check_stream(framing, content, route, results)
    elif roll < 0.8:
        route = rng.choice(READ_ROUTES)
        current.update(kind="read", route=route)
        started = time.monotonic()
        response = session.get(f"{base}{route}", timeout=TIMEOUT)
        results.record("read", route, response.status_code, time.monotonic() - started, response.content)
    elif roll < 0.85:
        current.update(kind="read", route="/api/show")
        started = time.monotonic()
        response = session.post(f"{base}/api/show", json={"model": model_for(rng)}, timeout=TIMEOUT)
        results.record("read", "/api/show", response.status_code, time.monotonic() - started, response.content)
    else:
        route = rng.choice([r for r, _, _ in GENERATION_ROUTES])
        body = rng.choice(BAD_BODIES)
        kind = "bad"
        if rng.random() < 0.05:
            body = BIG_BODY
            kind = "bad (3 MiB)"
        current.update(kind=kind, route=route)
        started = time.monotonic()
        response = session.post(f"{base}{route}", data=body, headers={"content-type": "application/json"},
                                timeout=TIMEOUT)
        # Ollama's generate answers a body without a prompt by loading the model (200), so only
        # a 5xx other than 503 counts against a bad body, as everywhere.
        results.record(kind, route, response.status_code, time.monotonic() - started, response.content)


def check_stream(framing, content, route, results):
    text = content.decode("utf-8", errors="replace")
    try:
        if framing == "sse":
            frames = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
            for frame in frames:
                if frame != "[DONE]":
                    json.loads(frame)
            if not frames:
                results.error(f"an empty event stream on {route}")
        else:
            lines = [json.loads(line) for line in text.splitlines() if line.strip()]
            if not lines or not lines[-1].get("done"):
                results.error(f"an NDJSON stream that did not end with done on {route}")
    except ValueError:
        results.error(f"a stream frame that is not JSON on {route}")


def client_loop(base, seed, results, stop, paused):
    rng = random.Random(seed)
    session = requests.Session()
    while not stop.is_set():
        if paused.is_set():
            time.sleep(0.1)
            continue
        # Hanging up mid-stream is this script's own doing and is counted as a "disconnect"
        # request, never as an error: an error is what the daemon did to a request that was
        # sent whole and read to its end.
        current = {"kind": "?", "route": "?"}
        try:
            one_request(session, base, rng, results, current)
        except requests.Timeout:
            results.error(f"timeout on {current['kind']} {current['route']}")
        except requests.ConnectionError as error:
            cause = error.args[0] if error.args else error
            while getattr(cause, "reason", None) is not None or getattr(cause, "args", None):
                inner = getattr(cause, "reason", None) or (cause.args[-1] if cause.args else None)
                if inner is None or inner is cause or isinstance(inner, str):
                    break
                cause = inner
            results.error(f"connection error on {current['kind']} {current['route']}: {type(cause).__name__}")
            session = requests.Session()
        except Exception as error:  # a bug in this script must not end a client silently
            results.error(f"client exception: {error!r}")


def warm_every_path(base):
    """Sends, for both models, every route and constraint kind the soak uses, and each bad body,
    once, so that the RSS baseline already holds what a first use allocates for good (a model's
    token trie, compiled grammars and their mask caches, the allocator's high-water marks of a
    model load and of the largest body) and only growth after that is counted."""
    session = requests.Session()
    constrained = [{}, {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}},
                   {"response_format": {"type": "json_object"}}, {"tools": TOOLS, "tool_choice": "required"},
                   {"tools": TOOLS, "tool_choice": "auto"}, {"grammar": GRAMMAR}]
    for model in (OTHER_MODEL, MODEL):
        for stream in (False, True):
            for extra in constrained:
                body = {"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8,
                        "stream": stream, **extra}
                session.post(f"{base}/v1/chat/completions", json=body, timeout=TIMEOUT).content
            session.post(f"{base}/v1/messages", timeout=TIMEOUT, json={
                "model": model, "max_tokens": 8, "stream": stream,
                "messages": [{"role": "user", "content": "Tell me a fact."}]}).content
            for extra in ({}, {"format": SCHEMA}):
                session.post(f"{base}/api/chat", timeout=TIMEOUT, json={
                    "model": model, "stream": stream, "options": {"num_predict": 8},
                    "messages": [{"role": "user", "content": "Describe the sea."}], **extra}).content
            session.post(f"{base}/api/generate", timeout=TIMEOUT, json={
                "model": model, "stream": stream, "prompt": "Once upon a time",
                "options": {"num_predict": 8}}).content
        session.post(f"{base}/api/show", json={"model": model}, timeout=TIMEOUT).content
    for route, _, _ in GENERATION_ROUTES:
        for body in BAD_BODIES:
            session.post(f"{base}{route}", data=body, headers={"content-type": "application/json"},
                         timeout=TIMEOUT).content
    session.post(f"{base}/api/generate", data=BIG_BODY, headers={"content-type": "application/json"},
                 timeout=TIMEOUT).content
    for route in READ_ROUTES:
        session.get(f"{base}{route}", timeout=TIMEOUT).content


def quiet_point(daemon, paused, busy_wait=60):
    """Pauses clients, waits for in-flight work, loads the main model: the same state each time."""
    paused.set()
    deadline = time.time() + busy_wait
    while time.time() < deadline:
        try:
            if daemon.sequences_in_use() == 0:
                break
        except requests.RequestException:
            pass
        time.sleep(0.5)
    requests.post(f"{daemon.base}/api/generate", timeout=TIMEOUT, json={
        "model": MODEL, "prompt": "Hello", "stream": False, "options": {"num_predict": 4}})
    time.sleep(1.0)
    loaded = [m["name"] for m in requests.get(f"{daemon.base}/api/ps", timeout=10).json()["models"]]
    split = daemon.rss_split()
    if split:
        print(f"  quiet point: loaded {loaded}; "
              + ", ".join(f"{k} {v / 2**20:.1f} MiB" if k != "Threads" else f"{k} {v}" for k, v in split.items()),
              flush=True)
    return daemon.rss_bytes(), split, loaded


def percentile(values, p):
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, round((len(values) - 1) * p))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds of load before RSS is read")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    daemon = Daemon()
    results = Results()
    stop, paused = threading.Event(), threading.Event()
    threads = [threading.Thread(target=client_loop, args=(daemon.base, args.seed * 1000 + n, results, stop, paused),
                                daemon=True) for n in range(args.clients)]
    print(f"soak: {args.clients} clients, warm-up {args.warmup:.0f} s, then {args.minutes} min on {daemon.base}"
          f" ({'started here' if daemon.process else 'attached'}); models {MODEL} and {OTHER_MODEL}", flush=True)
    started = time.monotonic()
    warm_every_path(daemon.base)
    print(f"  every route, model and body sent once in {time.monotonic() - started:.0f} s;"
          f" then {args.warmup:.0f} s of random load", flush=True)
    for thread in threads:
        thread.start()
    time.sleep(args.warmup)
    rss_start, split_start, loaded_start = quiet_point(daemon, paused)
    warmup_counts = sum(results.statuses.values())
    with results.lock:
        results.statuses.clear()
        results.latencies.clear()
    paused.clear()

    started = time.monotonic()
    end = started + args.minutes * 60
    rss_samples = []
    while time.monotonic() < end:
        time.sleep(min(30.0, max(0.0, end - time.monotonic())))
        try:
            rss_samples.append(daemon.rss_bytes())
        except (OSError, requests.RequestException):
            pass
        done = sum(results.statuses.values())
        print(f"  {time.monotonic() - started:5.0f} s: {done} requests", flush=True)
    elapsed = time.monotonic() - started
    rss_end, split_end, loaded_end = quiet_point(daemon, paused)
    stop.set()
    for thread in threads:
        thread.join(timeout=TIMEOUT)
    sequences = None
    deadline = time.time() + 15
    while time.time() < deadline:
        sequences = daemon.sequences_in_use()
        if sequences == 0:
            break
        time.sleep(0.5)
    panicked = daemon.panicked()
    exit_status = daemon.stop()

    total = sum(results.statuses.values())
    print(f"\nsoak report: {elapsed / 60:.1f} min, {args.clients} clients (after {warmup_counts} warm-up requests)")
    print(f"requests: {total} ({total / elapsed:.1f}/s)")
    by_route = collections.defaultdict(dict)
    for (route, status), count in results.statuses.items():
        by_route[route][status] = count
    print("statuses by route:")
    for route in sorted(by_route):
        cells = "  ".join(f"{status}: {count}" for status, count in sorted(by_route[route].items()))
        print(f"  {route:<24} {cells}")
    statuses = collections.Counter()
    for (_, status), count in results.statuses.items():
        statuses[status] += count
    print("statuses: " + "  ".join(f"{s}: {c}" for s, c in sorted(statuses.items())))
    print("latency (s)       count      p50      p99      max")
    everything = []
    for kind in sorted(results.latencies):
        values = results.latencies[kind]
        everything += values
        print(f"  {kind:<14} {len(values):7d} {percentile(values, .5):8.3f} {percentile(values, .99):8.3f}"
              f" {max(values):8.3f}")
    print(f"  {'all':<14} {len(everything):7d} {percentile(everything, .5):8.3f}"
          f" {percentile(everything, .99):8.3f} {max(everything or [0]):8.3f}")
    server_errors = sum(c for s, c in statuses.items() if s >= 500 and s != 503)
    print(f"5xx other than 503: {server_errors}")
    # This script sends every body at once, so a 408 is the daemon not reading in time.
    request_timeouts = statuses.get(408, 0)
    print(f"408 (the daemon did not read a request in time): {request_timeouts}")
    for route, status, body in results.server_errors:
        print(f"  {status} {route}: {body!r}")
    print(f"client-side errors: {sum(results.errors.values())} {dict(results.errors) or ''}")
    growth = (rss_end - rss_start) / rss_start * 100 if rss_start and rss_end else None
    mb = lambda b: f"{b / 2**20:.1f} MiB" if b else "unknown"
    samples = [s for s in rss_samples if s]
    print(f"RSS after warm-up: {mb(rss_start)}, at end: {mb(rss_end)}"
          + (f" ({growth:+.1f}%)" if growth is not None else "")
          + (f"; during the run {mb(min(samples))} to {mb(max(samples))}" if samples else ""))
    if split_start and split_end:
        print(f"  anonymous (heap, KV cache): {mb(split_start['RssAnon'])} -> {mb(split_end['RssAnon'])};"
              f" file-backed (mmapped model, binary): {mb(split_start['RssFile'])} -> {mb(split_end['RssFile'])};"
              f" threads {split_start['Threads']} -> {split_end['Threads']}; loaded {loaded_start} -> {loaded_end}")
    print(f"sequences still in use at the end: {sequences}")
    if daemon.process is not None:
        print(f"daemon log: {daemon.log.name}; panics logged: {'YES' if panicked else 'no'};"
              f" exit status on SIGTERM: {exit_status}")
    met = (server_errors == 0 and request_timeouts == 0 and not results.errors and growth is not None and growth < 10
           and sequences == 0 and not panicked and exit_status in (0, None))
    print(f"goal (0 5xx but 503, 0 408, 0 client errors, RSS growth < 10%, 0 sequences in use): {'MET' if met else 'NOT MET'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
