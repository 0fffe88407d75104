"""The official anthropic client against llamay's /v1/messages, plus curl for the raw events."""

import json
import subprocess

import anthropic
import pytest
import requests

from conftest import BASE, MODEL

client = anthropic.Anthropic(base_url=BASE, api_key="unused", max_retries=0)
QUESTION = [{"role": "user", "content": "Name one colour of the rainbow."}]
SCHEMA = {
    "type": "object",
    "properties": {"colour": {"type": "string", "maxLength": 20}, "warm": {"type": "boolean"}},
    "required": ["colour", "warm"],
}


def test_messages_create():
    message = client.messages.create(model=MODEL, max_tokens=24, system="Be brief.", messages=QUESTION, extra_body={"temperature": 0})
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text" and message.content[0].text.strip()
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 24


def test_stop_sequences():
    message = client.messages.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Count from 1 to 10, separated by commas."}],
        stop_sequences=["5"], extra_body={"temperature": 0},
    )
    if message.stop_reason == "stop_sequence":
        assert message.stop_sequence == "5"
        assert "5" not in message.content[0].text


def test_streaming_matches_the_final_message():
    with client.messages.stream(model=MODEL, max_tokens=24, messages=QUESTION, extra_body={"temperature": 0}) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.strip()
    assert final.content[0].text == text
    assert final.usage.output_tokens > 0


def test_structured_output_with_llamay_schema():
    message = client.messages.create(
        model=MODEL, max_tokens=80, messages=QUESTION, extra_body={"temperature": 0, "llamay_schema": SCHEMA}
    )
    document = json.loads(message.content[0].text)
    assert isinstance(document["colour"], str) and isinstance(document["warm"], bool)


def test_errors_in_anthropic_shape():
    missing = requests.post(f"{BASE}/v1/messages", json={"model": MODEL, "messages": QUESTION}, timeout=10)
    assert missing.status_code == 400
    assert missing.json()["type"] == "error"
    assert missing.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in missing.json()["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="no-such-model:1b", max_tokens=5, messages=QUESTION)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=5, messages=QUESTION, extra_body={"llamay_schema": {"if": {}}})


def test_raw_event_sequence_with_curl():
    body = {"model": MODEL, "max_tokens": 8, "messages": QUESTION, "stream": True}
    out = subprocess.run(
        ["curl", "-sN", f"{BASE}/v1/messages", "-H", "content-type: application/json", "-d", json.dumps(body)],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout
    events = [line[len("event: "):] for line in out.splitlines() if line.startswith("event: ")]
    assert events[:2] == ["message_start", "content_block_start"]
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(events) <= {"message_start", "content_block_start", "ping", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
