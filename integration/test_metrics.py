"""`GET /metrics` read by the official Prometheus Python client's text parser after real requests
through the official OpenAI client: every line parses, names follow the conventions, and the
counters move."""

import openai
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import BASE, MODEL


def scrape():
    response = requests.get(f"{BASE}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    families = {}
    for family in text_string_to_metric_families(response.text):
        families[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return families, samples, response.text


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_parse_and_move_after_a_chat_request():
    _, before, _ = scrape()
    client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused")
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=5)
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count."}], max_tokens=5, stream=True)
    assert sum(1 for _ in stream) > 0
    assert requests.get(f"{BASE}/v1/models/{MODEL}", timeout=10).status_code == 200
    assert requests.get(f"{BASE}/v1/models/no-such-model", timeout=10).status_code == 404

    families, after, text = scrape()
    route = "/v1/chat/completions"
    assert value(after, "llamay_http_requests_total", route=route, status="200") \
        == value(before, "llamay_http_requests_total", route=route, status="200") + 2
    # The parameterised route is one series per status, whatever the name asked for.
    assert value(after, "llamay_http_requests_total", route="/v1/models/{name:.*}", status="404") >= 1
    assert "no-such-model" not in text
    assert value(after, "llamay_prompt_tokens_total", model=MODEL) \
        >= value(before, "llamay_prompt_tokens_total", model=MODEL) + answer.usage.prompt_tokens
    assert value(after, "llamay_generated_tokens_total", model=MODEL) \
        >= value(before, "llamay_generated_tokens_total", model=MODEL) + answer.usage.completion_tokens
    assert value(after, "llamay_time_to_first_token_seconds_count", model=MODEL) \
        >= value(before, "llamay_time_to_first_token_seconds_count", model=MODEL) + 2
    assert value(after, "llamay_http_request_duration_seconds_count", route=route) \
        >= value(before, "llamay_http_request_duration_seconds_count", route=route) + 2
    assert value(after, "llamay_models_loaded") >= 1
    assert value(after, "llamay_sequences_in_use", model=MODEL) == 0

    # Conventions: counters end in _total (the parser strips it from the family name), durations
    # are histograms in seconds, and every family is llamay's or the process's.
    assert families["llamay_http_requests"] == "counter"
    assert families["llamay_http_request_duration_seconds"] == "histogram"
    assert families["llamay_time_to_first_token_seconds"] == "histogram"
    assert families["llamay_queue_depth"] == "gauge"
    assert all(name.startswith(("llamay_", "process_")) for name in families)
    for line in text.splitlines():
        if line.startswith("# TYPE ") and line.endswith(" counter"):
            assert line.split()[2].endswith("_total"), line
