"""Daemon behaviour under real clients: eviction with -max-loaded 1, a client disconnecting
mid-stream, 32 concurrent streaming clients, limits, stats and health."""

import concurrent.futures
import json
import subprocess
import tempfile
import time

import openai
import requests

from conftest import BASE, MODEL, loaded_models, stats_for

client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0)


def generate(model, tokens=2):
    response = requests.post(f"{BASE}/api/generate", json={"model": model, "prompt": "hi", "stream": False,
                                                           "options": {"num_predict": tokens}}, timeout=300)
    response.raise_for_status()
    return response.json()


def test_two_models_alternate_with_max_loaded_one(other_model):
    for _ in range(2):
        generate(MODEL)
        assert loaded_models() == [MODEL]
        generate(other_model)
        assert loaded_models() == [other_model]
    generate(MODEL)


def test_a_client_that_disconnects_frees_its_sequence():
    body = {"model": MODEL, "prompt": "Write a very long story about a lighthouse keeper.", "options": {"num_predict": 3000}}
    with requests.post(f"{BASE}/api/generate", json=body, stream=True, timeout=60) as response:
        lines = response.iter_lines()
        for _ in range(3):
            assert json.loads(next(lines))["done"] is False
        during = stats_for(MODEL)
        assert during["sequences_in_use"] >= 1 and during["requests_in_flight"] >= 1
    deadline = time.time() + 10
    while time.time() < deadline:
        after = stats_for(MODEL)
        if after["sequences_in_use"] == 0 and after["requests_in_flight"] == 0:
            break
        time.sleep(0.1)
    assert after["sequences_in_use"] == 0, after
    assert after["requests_in_flight"] == 0, after


def stream_one(index):
    chunks = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"Say something about the number {index}."}],
        max_tokens=24, stream=True, stream_options={"include_usage": True},
    )
    text, usage = "", None
    for chunk in chunks:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    return text, usage


def test_32_concurrent_streaming_clients_all_finish():
    with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(stream_one, range(32)))
    assert len(results) == 32
    for text, usage in results:
        assert usage is not None and usage.completion_tokens > 0
    stats = stats_for(MODEL)
    assert stats["sequences_in_use"] == 0 and stats["totals"]["requests"] >= 32


def test_a_body_over_the_limit_is_413():
    with tempfile.NamedTemporaryFile("w", suffix=".json") as big:
        big.write('{"model": "x", "prompt": "' + "a" * (9 * 1024 * 1024) + '"}')
        big.flush()
        status = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{BASE}/api/generate", "--data-binary", f"@{big.name}"],
            capture_output=True, text=True, timeout=60,
        ).stdout
    assert status == "413"


def test_stats_and_health():
    generate(MODEL)
    stats = requests.get(f"{BASE}/v1/stats", timeout=10).json()
    model = stats_for(MODEL)
    assert model["size_bytes"] > 0 and model["expires_at"]
    assert model["totals"]["generated_tokens"] > 0 and model["totals"]["tokens_per_second"] > 0
    assert "queue_depth" in model and "compiled_constraints" in stats
    assert requests.get(f"{BASE}/health", timeout=10).json()["status"] == "ok"
