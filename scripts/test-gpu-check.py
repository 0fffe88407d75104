#!/usr/bin/env python3
"""The checks of `scripts/test-gpu check`: two daemons on the same models, one with every layer
on the GPU (-ngl 99), one on the CPU (-ngl 0), and what issue 47 asks of them: the banner's
device lines, size_vram in /api/ps, the per-device fields of /v1/stats and /metrics, greedy
output GPU against CPU, a schema-constrained answer, a context fork, snapshot and restore,
embeddings (cosine GPU against CPU), num_gpu loading the model again, and tok/s at 1 and 4
clients. Prints a compact report and writes it (and the daemons' logs) to --out.

With --mode cpu (the rehearsal on a machine without a GPU) the GPU-only expectations are
reported as skipped; everything else runs the same. Standard library only.
"""

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

REPORT = []
FAILURES = []


def line(text=""):
    print(text, flush=True)
    REPORT.append(text)


def check(name, ok, detail, required=True):
    """One result line; a failed required check fails the run (the others still run)."""
    mark = "PASS" if ok else ("FAIL" if required else "NOTE")
    if not ok and required:
        FAILURES.append(name)
    line(f"  [{mark}] {name}: {detail}")


def skip(name, why):
    line(f"  [SKIP] {name}: {why}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(base, path, body=None, method=None, timeout=180):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method or ("POST" if body is not None else "GET"),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            text = answer.read().decode()
            status = answer.status
    except urllib.error.HTTPError as error:
        text = error.read().decode()
        status = error.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class Daemon:
    def __init__(self, label, binary, home, args, out):
        self.label = label
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(out, f"daemon-{label}.log")
        env = dict(os.environ, LLAMAY_HOME=home, OMP_WAIT_POLICY="passive")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen([binary, "serve", "--addr", f"127.0.0.1:{self.port}", *args],
                                        stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, limit=240):
        deadline = time.time() + limit
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.label} daemon exited with {self.process.returncode}:\n{self.tail()}")
            try:
                status, _ = request(self.base, "/health", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.label} daemon not ready in {limit}s:\n{self.tail()}")

    def banner(self):
        with open(self.log_path, errors="replace") as log:
            return [l.rstrip("\n") for l in log if l.startswith(("Device", "  ")) and ("layers" in l or "Device" in l or "CPU only" in l)]

    def tail(self, lines=30):
        with open(self.log_path, errors="replace") as log:
            return "".join(log.readlines()[-lines:])

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


def generate(daemon, model, prompt, tokens, options=None):
    body = {"model": model, "prompt": prompt, "stream": False,
            "options": {"temperature": 0, "num_predict": tokens, "seed": 7, **(options or {})}}
    started = time.time()
    status, answer = request(daemon.base, "/api/generate", body)
    if status != 200:
        raise RuntimeError(f"/api/generate on {daemon.label}: {status} {answer}")
    answer["wall"] = time.time() - started
    return answer


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def ps_entry(daemon, model):
    _, ps = request(daemon.base, "/api/ps")
    return next((m for m in ps.get("models", []) if m["name"].startswith(model.split(":")[0])), None)


def stats_model(daemon, model):
    _, stats = request(daemon.base, "/v1/stats")
    return stats, next((m for m in stats.get("models", []) if m["name"] == model), None)


def section_devices(gpu, cpu, args, expect_gpu):
    line("Devices")
    for daemon in (gpu, cpu):
        for text in daemon.banner():
            line(f"  banner ({daemon.label}) | {text}")
    banner = gpu.banner()
    if expect_gpu:
        check("banner device line", any(l.startswith("Device ") and "CUDA" in l and "free of" in l for l in banner),
              "one line per GPU with backend, name, free/total")
        check("banner layers line", any("layers offloaded" in l for l in banner), "the preloaded model's layers on the device")
    else:
        check("banner says CPU only", any("CPU only" in l for l in banner), banner[0] if banner else "no device line")
    ps = ps_entry(gpu, args.chat)
    ps_cpu = ps_entry(cpu, args.chat)
    vram, size = (ps or {}).get("size_vram", -1), (ps or {}).get("size", -1)
    if expect_gpu:
        check("/api/ps size_vram (GPU)", vram > 0 and size >= vram, f"size_vram={vram} size={size}")
    else:
        check("/api/ps size_vram (no GPU)", vram == 0 and size > 0, f"size_vram={vram} size={size}")
    check("/api/ps size_vram (-ngl 0)", (ps_cpu or {}).get("size_vram", -1) == 0, f"size_vram={(ps_cpu or {}).get('size_vram')} size={(ps_cpu or {}).get('size')}")
    stats, model = stats_model(gpu, args.chat)
    memory = (model or {}).get("memory") or {}
    devices = stats.get("devices", [])
    line(f"  /v1/stats gpu_backends={stats.get('gpu_backends')} devices={json.dumps(devices)}")
    line(f"  /v1/stats {args.chat} memory={json.dumps(memory)}")
    if expect_gpu:
        check("/v1/stats devices", len(devices) >= 1 and devices[0].get("total_bytes", 0) > 0 and devices[0].get("used_by_models_bytes", 0) > 0,
              f"{len(devices)} device(s)")
        check("all layers on the GPU", memory.get("gpu_layers") == memory.get("offloadable_layers") and memory.get("gpu_layers", 0) > 0,
              f"{memory.get('gpu_layers')}/{memory.get('offloadable_layers')} on {memory.get('device')}")
    else:
        check("/v1/stats devices (none)", devices == [] and memory.get("gpu_layers") == 0, f"devices={devices}")
    _, metrics = request(gpu.base, "/metrics")
    device_metrics = [l for l in str(metrics).splitlines() if l.startswith(("llamay_device_memory", "llamay_model_gpu_layers", "llamay_model_memory"))]
    for text in device_metrics:
        line(f"  metrics | {text}")
    if expect_gpu:
        check("/metrics per-device", any(l.startswith("llamay_device_memory_total_bytes{") for l in device_metrics), f"{len(device_metrics)} lines")
    else:
        check("/metrics model memory", any(l.startswith("llamay_model_memory_bytes{") for l in device_metrics), f"{len(device_metrics)} lines")


PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Here is a list of five fruits:",
    "Water boils at",
]


def section_greedy(gpu, cpu, args):
    line("Greedy output, GPU against CPU (48 tokens, temperature 0)")
    equal = 0
    for prompt in PROMPTS:
        a = generate(gpu, args.chat, prompt, 48)["response"]
        b = generate(cpu, args.chat, prompt, 48)["response"]
        at = first_difference(a, b)
        if at is None:
            equal += 1
            line(f"  equal    | {prompt!r} -> {a[:60]!r}")
        else:
            line(f"  diverge  | {prompt!r} at char {at}: gpu {a[max(0, at - 10):at + 30]!r} cpu {b[max(0, at - 10):at + 30]!r}")
    # Not required: the backends sum in different orders, so a near tie may go either way.
    check("greedy GPU == CPU", equal == len(PROMPTS), f"{equal}/{len(PROMPTS)} equal", required=False)


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "languages"],
    "additionalProperties": False,
}


def valid_person(value):
    if not isinstance(value, dict) or set(value) != {"name", "age", "languages"}:
        return False
    languages = value["languages"]
    return (isinstance(value["name"], str) and len(value["name"]) <= 40
            and isinstance(value["age"], int) and not isinstance(value["age"], bool) and 0 <= value["age"] <= 150
            and isinstance(languages, list) and 1 <= len(languages) <= 3
            and all(isinstance(l, str) and len(l) <= 20 for l in languages))


def section_schema(gpu, cpu, args):
    line("Schema-constrained answer")
    body = {"model": args.chat, "temperature": 0, "max_tokens": 128,
            "messages": [{"role": "user", "content": "Describe a fictional programmer as JSON."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}}
    outputs = {}
    for daemon in (gpu, cpu):
        status, answer = request(daemon.base, "/v1/chat/completions", body)
        text = answer["choices"][0]["message"]["content"] if status == 200 else str(answer)
        try:
            ok = valid_person(json.loads(text))
        except ValueError:
            ok = False
        outputs[daemon.label] = text
        check(f"schema ({daemon.label})", status == 200 and ok, text[:100])
    check("schema GPU == CPU", outputs["gpu"] == outputs["cpu"], "same document" if outputs["gpu"] == outputs["cpu"] else "documents differ", required=False)


def ask_in_context(daemon, model, context, question):
    body = {"model": model, "temperature": 0, "max_tokens": 16, "llamay_context": context,
            "messages": [{"role": "user", "content": question}]}
    status, answer = request(daemon.base, "/v1/chat/completions", body)
    if status != 200:
        raise RuntimeError(f"chat in {context}: {status} {answer}")
    return answer["choices"][0]["message"]["content"]


def section_contexts(gpu, args):
    line("Context fork, snapshot and restore (GPU daemon)")
    messages = [{"role": "system", "content": "Translate into French."}, {"role": "user", "content": "cat"},
                {"role": "assistant", "content": "chat"}]
    status, created = request(gpu.base, "/v1/contexts", {"model": args.chat, "messages": messages})
    check("context created", status in (200, 201), f"{status} tokens={created.get('tokens') if isinstance(created, dict) else created}")
    parent = created["id"]
    status, forked = request(gpu.base, f"/v1/contexts/{parent}/fork?n=2", {})
    children = [c["id"] for c in forked.get("contexts", [])] if isinstance(forked, dict) else []
    check("fork n=2", status in (200, 201) and len(children) == 2, f"{status} {children}")
    answers = [ask_in_context(gpu, args.chat, context, "dog") for context in [parent, *children]]
    check("forks answer as the parent", len(set(answers)) == 1, f"{answers}")
    status, snapshot = request(gpu.base, f"/v1/contexts/{parent}/snapshot", {})
    check("snapshot", status in (200, 201) and "snapshot" in snapshot, f"{status} bytes={snapshot.get('bytes') if isinstance(snapshot, dict) else snapshot}")
    status, restored = request(gpu.base, "/v1/contexts", {"snapshot": snapshot["snapshot"]})
    check("restore", status in (200, 201), f"{status} {restored.get('id') if isinstance(restored, dict) else restored}")
    again = ask_in_context(gpu, args.chat, restored["id"], "dog")
    check("restored context answers as the parent", again == answers[0], f"{again!r} vs {answers[0]!r}")


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def section_embeddings(gpu, cpu, args):
    line("Embeddings, GPU against CPU")
    texts = ["The cat sits on the mat.", "GPU offload for a local LLM daemon.", "Quel temps fait-il aujourd'hui ?"]
    vectors = {}
    for daemon in (gpu, cpu):
        status, answer = request(daemon.base, "/v1/embeddings", {"model": args.embed, "input": texts})
        check(f"embeddings ({daemon.label})", status == 200, f"{status} {len(answer.get('data', [])) if isinstance(answer, dict) else answer} vectors")
        vectors[daemon.label] = [d["embedding"] for d in answer["data"]]
    similarities = [cosine(a, b) for a, b in zip(vectors["gpu"], vectors["cpu"])]
    check("cosine GPU vs CPU >= 0.999", min(similarities) >= 0.999, " ".join(f"{s:.6f}" for s in similarities))
    _, model = stats_model(gpu, args.embed)
    line(f"  /v1/stats {args.embed} memory={json.dumps((model or {}).get('memory'))}")


def section_num_gpu(gpu, args, expect_gpu):
    line("num_gpu loads the model again with other layers (GPU daemon)")
    generate(gpu, args.chat, "Hello", 4, {"num_gpu": 10})
    _, model = stats_model(gpu, args.chat)
    memory = (model or {}).get("memory") or {}
    vram = (ps_entry(gpu, args.chat) or {}).get("size_vram")
    if expect_gpu:
        check("num_gpu 10", memory.get("gpu_layers") == 10, f"gpu_layers={memory.get('gpu_layers')} size_vram={vram}")
    else:
        check("num_gpu without a GPU changes nothing", memory.get("gpu_layers") == 0, f"gpu_layers={memory.get('gpu_layers')}")
    generate(gpu, args.chat, "Hello", 4)
    _, kept = stats_model(gpu, args.chat)
    check("no num_gpu keeps the loaded copy", (kept.get("memory") or {}).get("gpu_layers") == memory.get("gpu_layers"),
          f"gpu_layers={(kept.get('memory') or {}).get('gpu_layers')}")
    generate(gpu, args.chat, "Hello", 4, {"num_gpu": 99})
    _, back = stats_model(gpu, args.chat)
    line(f"  num_gpu 99: gpu_layers={(back.get('memory') or {}).get('gpu_layers')} size_vram={(ps_entry(gpu, args.chat) or {}).get('size_vram')}")


STORY = "Write a long, detailed story about a lighthouse keeper who finds a map."


def throughput(daemon, model, clients, tokens):
    results = [None] * clients

    def one(i):
        results[i] = generate(daemon, model, STORY, tokens, {"seed": 7 + i})

    started = time.time()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - started
    generated = sum(r.get("eval_count", 0) for r in results)
    per_request = [r["eval_count"] / (r["eval_duration"] / 1e9) for r in results if r.get("eval_duration")]
    return generated / wall, sum(per_request) / len(per_request), generated


def section_throughput(gpu, cpu, args):
    line(f"Throughput (/api/generate, {args.tokens} tokens a request, greedy)")
    line("  daemon  clients  aggregate tok/s  per-request tok/s  tokens")
    for daemon in (gpu, cpu):
        generate(daemon, args.chat, "Warm up", 8)
        for clients in (1, 4):
            aggregate, per_request, generated = throughput(daemon, args.chat, clients, args.tokens)
            line(f"  {daemon.label:<6}  {clients:>7}  {aggregate:>15.1f}  {per_request:>17.1f}  {generated:>6}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mode", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--chat", required=True)
    parser.add_argument("--embed", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    expect_gpu = args.mode == "gpu"
    cores = os.cpu_count() or 2
    started = time.time()
    line(f"llamay GPU check ({args.mode}), {time.strftime('%Y-%m-%d %H:%M:%S')}, {cores} cores")
    for tool in (["nvidia-smi", "--query-gpu=name,memory.total,memory.used,driver_version", "--format=csv,noheader"],):
        try:
            line("  " + subprocess.run(tool, capture_output=True, text=True, timeout=20).stdout.strip())
        except (OSError, subprocess.TimeoutExpired):
            line("  (no nvidia-smi)")
    daemons = []
    try:
        common = ["-m", args.chat, "--embed", args.embed, "--parallel", "4"]
        homes = {}
        for label in ("gpu", "cpu"):
            homes[label] = os.path.join(args.state, "home") if label == "gpu" else os.path.join(args.state, "home-cpu")
        # Two daemons cannot share one store (it is locked): the CPU one gets a copy.
        subprocess.run(["rm", "-rf", homes["cpu"]], check=True)
        subprocess.run(["cp", "-a", homes["gpu"], homes["cpu"]], check=True)
        gpu = Daemon("gpu", args.binary, homes["gpu"], [*common, "-ngl", "99", "-t", str(max(1, min(4, cores // 4)))], args.out)
        daemons.append(gpu)
        cpu = Daemon("cpu", args.binary, homes["cpu"], [*common, "-ngl", "0", "-t", str(max(1, cores // 2))], args.out)
        daemons.append(cpu)
        try:
            gpu.wait_ready()
            cpu.wait_ready()
        except RuntimeError as error:
            check("daemons start", False, str(error))
            return
        line(f"  daemons ready after {time.time() - started:.0f}s")
        for section in (lambda: section_devices(gpu, cpu, args, expect_gpu), lambda: section_greedy(gpu, cpu, args),
                        lambda: section_schema(gpu, cpu, args), lambda: section_contexts(gpu, args),
                        lambda: section_embeddings(gpu, cpu, args), lambda: section_throughput(gpu, cpu, args),
                        lambda: section_num_gpu(gpu, args, expect_gpu)):
            try:
                section()
            except Exception as error:  # one broken section must not hide the others
                check("section ran", False, f"{type(error).__name__}: {error}")
    finally:
        for daemon in daemons:
            daemon.stop()
        finish(started, args.out)


def finish(started, out):
    """Ends the report and writes it to `out`."""
    line(f"done in {time.time() - started:.0f}s: {len(FAILURES)} failed" + (f" ({', '.join(FAILURES)})" if FAILURES else ""))
    with open(os.path.join(out, "report.txt"), "w") as report:
        report.write("\n".join(REPORT) + "\n")


if __name__ == "__main__":
    main()
    sys.exit(1 if FAILURES else 0)
