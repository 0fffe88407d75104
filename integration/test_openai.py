"""The official openai client against llamay's /v1/chat/completions, plus curl for raw SSE."""

import json
import subprocess
from typing import Literal

import jsonschema
import openai
import pydantic
import pytest
import requests

from conftest import BASE, MODEL, REPO

client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0)
QUESTION = [{"role": "user", "content": "Name one colour of the rainbow."}]


class Ticket(pydantic.BaseModel):
    category: Literal["billing", "technical", "account", "other"]
    urgency: Literal["low", "normal", "high"]
    summary: str = pydantic.Field(max_length=60)


def test_chat_returns_text_and_usage():
    response = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=24, temperature=0)
    choice = response.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    assert response.usage.prompt_tokens > 0
    assert 0 < response.usage.completion_tokens <= 24
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens


def test_max_tokens_bounds_the_answer():
    response = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Write a long poem about the sea."}], max_completion_tokens=5
    )
    assert response.usage.completion_tokens <= 5
    assert response.choices[0].finish_reason == "length"


def test_streaming_with_usage_in_the_last_chunk():
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=24, temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens > 0
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes in (["stop"], ["length"])


def test_stream_and_non_stream_agree_at_temperature_zero():
    plain = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=16, temperature=0, seed=7)
    streamed = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=16, temperature=0, seed=7, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == plain.choices[0].message.content


def test_structured_output_with_a_pydantic_model():
    completion = client.beta.chat.completions.parse(
        model=MODEL,
        messages=[
            {"role": "system", "content": "Classify the support message. Return only the object."},
            {"role": "user", "content": "I was charged twice for order A-1042 and cannot log in."},
        ],
        response_format=Ticket,
        max_tokens=200,
        temperature=0,
    )
    ticket = completion.choices[0].message.parsed
    assert isinstance(ticket, Ticket)


def test_json_object_and_llamay_format_give_json():
    for extra in ({"response_format": {"type": "json_object"}}, {"extra_body": {"llamay_format": "json"}}):
        response = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Give a JSON object describing a cat."}], max_tokens=120, temperature=0, **extra
        )
        if response.choices[0].finish_reason == "stop":
            json.loads(response.choices[0].message.content)


def test_the_spec_order_schema_with_curl():
    schema = json.loads((REPO / "testdata/schemas/order.json").read_text())
    body = {
        "model": MODEL,
        "temperature": 0,
        "max_tokens": 400,
        "messages": [{"role": "user", "content": "Order 7 from Acme: 3 widgets at 4.50 EUR each, ship to Lyon, postcode 69001."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "order", "schema": schema}},
    }
    # Exactly as the spec sends it: curl -d, so no JSON content type.
    out = subprocess.run(
        ["curl", "-s", f"{BASE}/v1/chat/completions", "-d", json.dumps(body)], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    response = json.loads(out)
    assert response["choices"][0]["finish_reason"] == "stop", response
    jsonschema.validate(json.loads(response["choices"][0]["message"]["content"]), schema)


def test_grammar_constrains_the_answer():
    response = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Is the sky blue? Answer yes or no."}],
        max_tokens=8,
        temperature=0,
        extra_body={"llamay_grammar": 'root ::= "yes" | "no"'},
    )
    assert response.choices[0].message.content in ("yes", "no")


def test_a_refused_schema_keyword_is_a_400_naming_it():
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=MODEL,
            messages=QUESTION,
            extra_body={"llamay_schema": {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}},
        )
    assert refused.value.status_code == 400
    message = refused.value.body["message"]
    assert 'properties.a uses "not"' in message


def test_a_grammar_and_a_schema_together_are_refused():
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=MODEL,
            messages=QUESTION,
            response_format={"type": "json_object"},
            extra_body={"grammar": 'root ::= "a"'},
        )


def test_errors_in_openai_shape():
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model:1b", messages=QUESTION)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=QUESTION, n=2)
    malformed = requests.post(f"{BASE}/v1/chat/completions", data='{"model": ', timeout=10)
    assert malformed.status_code == 400
    assert malformed.json()["error"]["type"] == "Bad Request"


def test_models_list():
    ids = [m.id for m in client.models.list()]
    assert MODEL in ids


def test_raw_sse_with_curl():
    body = {"model": MODEL, "messages": QUESTION, "max_tokens": 8, "stream": True}
    out = subprocess.run(
        ["curl", "-sN", f"{BASE}/v1/chat/completions", "-H", "content-type: application/json", "-d", json.dumps(body)],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout
    frames = [f for f in out.split("\n\n") if f]
    assert all(f.startswith("data: ") for f in frames)
    assert frames[-1] == "data: [DONE]"
    first = json.loads(frames[0][len("data: "):])
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"]["role"] == "assistant"
