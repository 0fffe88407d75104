"""The official ollama client against llamay's /api routes, the tutorial's classify(), and curl
for raw NDJSON."""

import json
import subprocess
import time
from typing import Literal

import ollama
import pydantic
import pytest
import requests

from conftest import BASE, MODEL, loaded_models

client = ollama.Client(host=BASE)
QUESTION = [{"role": "user", "content": "Name one colour of the rainbow."}]

# The tutorial's schema and classify(), unchanged but for the base URL and model.
SCHEMA = {
    "type": "object",
    "properties": {
        "category": {"type": "string", "enum": ["billing", "technical", "account", "other"]},
        "urgency": {"type": "string", "enum": ["low", "normal", "high"]},
        "order_id": {"type": ["string", "null"]},
        "summary": {"type": "string"},
    },
    "required": ["category", "urgency", "summary"],
}


def classify(text, model=MODEL):
    response = requests.post(f"{BASE}/api/chat", json={
        "model": model,
        "messages": [
            {"role": "system", "content": "Classify the support message. Return only the object."},
            {"role": "user", "content": text},
        ],
        "format": SCHEMA,
        "stream": False,
        "options": {"temperature": 0.0},
    }, timeout=300)
    response.raise_for_status()
    return json.loads(response.json()["message"]["content"])


class Colour(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=20)
    warm: bool


def test_tutorial_classify():
    result = classify("I was charged twice for order A-1042 and cannot log in.")
    assert isinstance(result, dict)
    assert result["category"] in ("billing", "technical", "account", "other")
    assert result["urgency"] in ("low", "normal", "high")
    assert isinstance(result["summary"], str)


def test_chat_with_counts_and_durations():
    response = client.chat(model=MODEL, messages=QUESTION, options={"temperature": 0, "num_predict": 16})
    assert response.done and response.message.role == "assistant"
    assert response.message.content.strip()
    assert 0 < response.eval_count <= 16
    assert response.prompt_eval_count > 0
    assert response.total_duration >= response.eval_duration > 0


def test_streaming_is_the_default_over_ndjson():
    parts = list(client.chat(model=MODEL, messages=QUESTION, stream=True, options={"num_predict": 16}))
    assert parts[-1].done and parts[-1].done_reason in ("stop", "length")
    assert all(not p.done for p in parts[:-1])
    assert "".join(p.message.content for p in parts).strip()


def test_structured_output_with_a_pydantic_model():
    response = client.chat(model=MODEL, messages=QUESTION, format=Colour.model_json_schema(), options={"temperature": 0})
    Colour.model_validate_json(response.message.content)


def test_format_json_gives_json():
    response = client.generate(model=MODEL, prompt="Give the capital of France as JSON.", format="json", options={"temperature": 0, "num_predict": 120})
    if response.done_reason == "stop":
        json.loads(response.response)


def test_generate_and_raw():
    response = client.generate(model=MODEL, prompt="The capital of France is", raw=True, options={"temperature": 0, "num_predict": 8})
    assert response.response.strip() and response.eval_count <= 8


def test_list_show_ps_version():
    assert MODEL in [m.model for m in client.list().models]
    shown = client.show(MODEL)
    assert shown.details.format == "gguf" and shown.details.family
    client.generate(model=MODEL, prompt="hi", options={"num_predict": 1})
    assert MODEL in [m.model for m in client.ps().models]
    assert requests.get(f"{BASE}/api/version", timeout=10).json()["version"]


def test_keep_alive_expiry_and_unload():
    client.generate(model=MODEL, prompt="hi", keep_alive="2s", options={"num_predict": 2})
    assert MODEL in loaded_models()
    time.sleep(3.5)
    assert MODEL not in loaded_models(), "the model should unload 2 s after its last request"
    client.generate(model=MODEL, prompt="hi", options={"num_predict": 2})
    assert MODEL in loaded_models()
    unloaded = requests.post(f"{BASE}/api/generate", json={"model": MODEL, "keep_alive": 0}, timeout=60).json()
    assert unloaded["done_reason"] == "unload"
    time.sleep(0.2)
    assert MODEL not in loaded_models()


def test_errors_in_ollama_shape():
    with pytest.raises(ollama.ResponseError) as missing:
        client.chat(model="no-such-model:1b", messages=QUESTION)
    assert missing.value.status_code == 404
    bad = requests.post(f"{BASE}/api/chat", data="{not json", timeout=10)
    assert bad.status_code == 400 and isinstance(bad.json()["error"], str)
    refused = requests.post(f"{BASE}/api/chat", json={"model": MODEL, "messages": QUESTION, "stream": False,
                                                       "format": {"type": "object", "not": {"required": ["a"]}}}, timeout=10)
    assert refused.status_code == 400 and '"not"' in refused.json()["error"]
    long_prompt = "word " * 60000
    too_long = requests.post(f"{BASE}/api/generate", json={"model": MODEL, "prompt": long_prompt, "stream": False}, timeout=120)
    assert too_long.status_code == 400 and "context" in too_long.json()["error"]


def test_raw_ndjson_with_curl():
    body = {"model": MODEL, "messages": QUESTION, "options": {"num_predict": 8}}
    out = subprocess.run(["curl", "-sN", f"{BASE}/api/chat", "-d", json.dumps(body)], capture_output=True, text=True, check=True, timeout=120).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[-1]["done"] is True and "eval_count" in lines[-1]
    assert all(line["done"] is False for line in lines[:-1])
