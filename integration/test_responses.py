"""The official openai client's Responses API against llamay (issue 61): create, the typed event
stream (its sequence checked), `responses.parse` into a pydantic model, a function-tool loop
continued with `previous_response_id`, a chained conversation whose second turn reuses the
first turn's KV state (`cached_tokens`), retrieve / input_items / delete, and the refusals. Then
the OpenAI Agents SDK's `OpenAIResponsesModel` running a function-tool agent to its final
output, and a chain that continues after the daemon restarts (a daemon this file starts on a
store of its own), whose responses only the key that created them can see.

SmolLM2 is small and decoding is greedy: the tests check shapes, counts and what the daemon
reports, never what the model chose to say.
"""

import json
import pathlib
import tempfile
from typing import Literal

import openai
import pydantic
import pytest
import requests

from conftest import BASE, MODEL, OwnDaemon, store_file_of

client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0)
QUESTION = "Name one colour of the rainbow."
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for one city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class Ticket(pydantic.BaseModel):
    category: Literal["billing", "technical", "account", "other"]
    urgency: Literal["low", "normal", "high"]


def test_create_answers_a_message_with_usage():
    response = client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=24, temperature=0)
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status in ("completed", "incomplete")
    message = response.output[0]
    assert (message.type, message.role, message.content[0].type) == ("message", "assistant", "output_text")
    assert response.output_text.strip() and response.output_text == message.content[0].text
    usage = response.usage
    assert usage.input_tokens > 0 and 0 < usage.output_tokens <= 24
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.output_tokens_details.reasoning_tokens == 0
    assert usage.input_tokens_details.cached_tokens <= usage.input_tokens
    assert response.store is True and response.model == MODEL


def test_the_budget_makes_a_response_incomplete():
    response = client.responses.create(
        model=MODEL, input="Write a long poem about the sea.", max_output_tokens=5, temperature=0
    )
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens <= 5


def test_instructions_and_input_items_reach_the_prompt():
    bare = client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=4, temperature=0, store=False)
    told = client.responses.create(
        model=MODEL,
        instructions="You answer in French, in one word.",
        input=[
            {"role": "developer", "content": "Be brief."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]},
        ],
        max_output_tokens=4,
        temperature=0,
        store=False,
        metadata={"suite": "responses"},
    )
    assert told.usage.input_tokens > bare.usage.input_tokens
    assert told.instructions == "You answer in French, in one word."
    assert told.metadata == {"suite": "responses"}


def test_stream_sends_the_typed_events_in_order():
    # A budget the short answer fits: the client's final response needs `response.completed`.
    with client.responses.stream(model=MODEL, input=QUESTION, max_output_tokens=80, temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"
    ], kinds
    assert kinds[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"], kinds
    assert kinds[-1] == "response.completed", kinds
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert len(deltas) >= 2 and kinds.count("response.output_text.delta") == len(kinds) - 8
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "".join(deltas) == final.output_text
    assert final.id == events[0].response.id and final.status == "completed"
    assert client.responses.retrieve(final.id).output_text == final.output_text


def test_parse_fills_a_pydantic_model():
    response = client.responses.parse(
        model=MODEL,
        input="Classify this support ticket: I was charged twice for my subscription this month.",
        text_format=Ticket,
        max_output_tokens=60,
        temperature=0,
    )
    assert isinstance(response.output_parsed, Ticket)
    assert response.output_parsed == Ticket.model_validate_json(response.output_text)


def function_calls(response):
    return [item for item in response.output if item.type == "function_call"]


def test_a_function_tool_loop_continues_with_previous_response_id():
    first = client.responses.create(
        model=MODEL, input="What is the weather in Paris?", tools=[WEATHER_TOOL], tool_choice="required",
        parallel_tool_calls=False, max_output_tokens=60, temperature=0,
    )
    calls = function_calls(first)
    assert len(calls) == 1 and first.status == "completed", first.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id and call.id.startswith("fc_")
    assert isinstance(json.loads(call.arguments)["city"], str)
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=[WEATHER_TOOL], tool_choice="none",
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C."}],
        max_output_tokens=40, temperature=0,
    )
    assert second.previous_response_id == first.id
    assert second.output[0].type == "message" and second.output_text.strip()
    assert not function_calls(second)
    # The stored turn came back ahead of the result: the prompt is the one a client resending
    # the whole history gets.
    resent = client.responses.create(
        model=MODEL, tools=[WEATHER_TOOL], tool_choice="none", store=False, max_output_tokens=40, temperature=0,
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C."},
        ],
    )
    assert resent.usage.input_tokens == second.usage.input_tokens


def test_a_chained_turn_reuses_the_first_turns_kv_state():
    first = client.responses.create(
        model=MODEL, input="My name is Ada and I keep bees. Say hello to me.", max_output_tokens=16, temperature=0
    )
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input="What is my name?", max_output_tokens=16, temperature=0
    )
    # Every prompt token of turn 1 but its last is reused: the last is decoded as the answer's
    # first step, not in the prefill's batch, and only batch-prefilled KV is reused (see the
    # docs/contexts-and-eval.md); it and turn 1's answer are prefilled again.
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 1, (first.usage, second.usage)
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


def test_retrieve_lists_input_items_in_pages_and_delete_removes_it():
    texts = ["First line.", "Second line.", "Third line."]
    created = client.responses.create(
        model=MODEL, input=[{"role": "user", "content": text} for text in texts], max_output_tokens=4, temperature=0
    )
    got = client.responses.retrieve(created.id)
    assert (got.id, got.output_text, got.usage.input_tokens) == (created.id, created.output_text, created.usage.input_tokens)
    newest_first = client.responses.input_items.list(created.id)
    assert [item.content[0].text for item in newest_first.data] == texts[::-1]
    one_by_one = list(client.responses.input_items.list(created.id, limit=1, order="asc"))
    assert [item.content[0].text for item in one_by_one] == texts
    assert len({item.id for item in one_by_one}) == 3
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_store_false_keeps_nothing():
    response = client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=4, store=False)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_refusals_are_openai_errors_naming_what_is_wrong():
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model=MODEL, input="hi", previous_response_id="resp_00000000000000000000000000000000")
    assert "resp_00000000000000000000000000000000" in unknown.value.message
    assert unknown.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as item:
        client.responses.create(model=MODEL, input=[{"type": "computer_call_output", "call_id": "c", "output": {}}])
    assert "computer_call_output" in item.value.message
    with pytest.raises(openai.BadRequestError) as orphan:
        client.responses.create(model=MODEL, input=[{"type": "function_call_output", "call_id": "call_nobody", "output": "x"}])
    assert "call_nobody" in orphan.value.message
    for hosted in ({"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["vs_1"]},
                   {"type": "computer_use_preview", "display_width": 800, "display_height": 600, "environment": "linux"}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model=MODEL, input="hi", tools=[hosted])
        assert hosted["type"] in refused.value.message
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model:1b", input="hi")
    malformed = requests.post(f"{BASE}/v1/responses", data='{"model": ', timeout=10)
    assert malformed.status_code == 400 and malformed.json()["error"]["type"] == "Bad Request"


# ---- the OpenAI Agents SDK -------------------------------------------------------------------


def test_the_agents_sdk_runs_a_function_tool_agent_to_its_final_output():
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    asked = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather for one city."""
        asked.append(city)
        return f"It is sunny and 21 C in {city}."

    model = OpenAIResponsesModel(
        model=MODEL, openai_client=openai.AsyncOpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0)
    )
    agent = Agent(
        name="weather",
        instructions="Answer questions about the weather with the get_weather tool.",
        tools=[get_weather],
        model=model,
        # "required" for the first turn; the SDK sets tool_choice back to auto once a tool ran.
        model_settings=ModelSettings(temperature=0, tool_choice="required", parallel_tool_calls=False, max_tokens=200),
    )
    result = Runner.run_sync(agent, "What is the weather in Paris?", max_turns=6)
    assert asked and all(isinstance(city, str) for city in asked)
    assert isinstance(result.final_output, str) and result.final_output.strip()
    assert any(item.type == "tool_call_output_item" for item in result.new_items)


# ---- a chain across a daemon restart, and the key that owns it ---------------------------------


def keyed_client(daemon, key):
    return openai.OpenAI(base_url=f"{daemon.base}/v1", api_key=key, max_retries=0)


def test_a_chain_continues_after_a_restart_and_only_its_key_sees_it():
    with tempfile.TemporaryDirectory() as workdir:
        home = pathlib.Path(workdir)
        link = home / "chainmodel.gguf"
        link.symlink_to(store_file_of(MODEL))
        served, key = "chainmodel", "key-one-0123456789"
        daemon = OwnDaemon(home, link, "-api-key", key)
        try:
            first = keyed_client(daemon, key).responses.create(
                model=served, input="My name is Ada and I keep bees. Say hello to me.", max_output_tokens=16,
                temperature=0,
            )
        finally:
            daemon.stop()
        daemon = OwnDaemon(home, link, "-api-key", key)
        try:
            client = keyed_client(daemon, key)
            assert client.responses.retrieve(first.id).output_text == first.output_text
            second = client.responses.create(
                model=served, previous_response_id=first.id, input="What is my name?", max_output_tokens=16,
                temperature=0,
            )
            assert second.status in ("completed", "incomplete") and second.output_text.strip()
            # A fresh daemon holds no KV state: the whole conversation was prefilled again.
            assert second.usage.input_tokens_details.cached_tokens == 0
            assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
        finally:
            daemon.stop()
        daemon = OwnDaemon(home, link, "-api-key", "key-two-0123456789")
        try:
            other = keyed_client(daemon, "key-two-0123456789")
            with pytest.raises(openai.NotFoundError):
                other.responses.retrieve(first.id)
            with pytest.raises(openai.NotFoundError):
                other.responses.create(model=served, previous_response_id=second.id, input="Again?")
        finally:
            daemon.stop()
