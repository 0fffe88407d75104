"""What agent frameworks expect of the daemon (issue 45), through their own clients unchanged but
for the base URL: instructor's TOOLS and JSON modes, litellm with a named tool, LangChain's
json_mode, every JSON mode answering an object, the ollama client's `show` capabilities for a
chat and an embedding model, text that streams while tools are offered (all three routes), the
event sequence of an Anthropic forced-tool stream, budgets too small for a whole call, and a
`required` answer that stops at the first repeated call.

SmolLM2 is small and decoding is greedy, so each answer repeats; the tests check shapes (one
call, an object, several chunks), never what the model chose to say.
"""

import json
import os
import subprocess

# litellm fetches its model price list from the network at import unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import anthropic  # noqa: E402
import instructor  # noqa: E402
import litellm  # noqa: E402
import openai  # noqa: E402
import pytest  # noqa: E402
import requests  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from conftest import BASE, MODEL, REPO, installed_models  # noqa: E402
# The tools and clients of the tool tests; FINAL_RESULT is pydantic-ai's output tool, which
# SmolLM2 used to call again and again under "required".
from test_tools import (  # noqa: E402
    FINAL_RESULT, TIME, WEATHER, WEATHER_ANTHROPIC, anthropic_client, ollama_client, openai_client,
)

BIN = os.environ.get("LLAMAY_BIN", str(REPO / "target" / "release" / "llamay"))
EMBEDDING_MODEL = os.environ.get("LLAMAY_EMBEDDING_MODEL", "all-minilm:l6-v2")

ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
# A question SmolLM2 answers in prose even when it is told about the weather tool.
TEXT_QUESTION = [{"role": "user", "content": "Write two sentences about the sea."}]
# In JSON mode SmolLM2 answered these with a bare value (`1.1111111111111111e01`,
# `100.0000000000000001`, `"2+2"`) while the top level could be any JSON value.
COUNT_QUESTION = "How many legs does a cat have?"
PRICE_QUESTION = "Give the price of the lamp: it costs 100 dollars."
EXTRACT_QUESTION = "The lamp is 100 dollars."
SUM_QUESTION = "What is 2+2?"


# ---- one call for a named tool; a repeated call ends the calls --------------------------------


class City(BaseModel):
    name: str
    country: str


def test_instructor_tools_mode_makes_one_call():
    client = instructor.from_openai(openai_client, mode=instructor.Mode.TOOLS)
    city, completion = client.chat.completions.create_with_completion(
        model=MODEL, response_model=City, max_retries=0, temperature=0,
        messages=[{"role": "user", "content": "Paris is the capital of France. Extract the city."}],
    )
    assert isinstance(city, City)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert len(choice.message.tool_calls) == 1


def test_litellm_named_tool_is_one_call():
    response = litellm.completion(
        model=f"openai/{MODEL}", api_base=f"{BASE}/v1", api_key="unused", messages=ASK_WEATHER,
        tools=[TIME, WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0, max_tokens=200,
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert set(json.loads(call.function.arguments)) == {"city", "unit"}


def test_anthropic_named_tool_is_one_call_with_parallel_use_allowed():
    message = anthropic_client.messages.create(
        model=MODEL, max_tokens=200, messages=ASK_WEATHER, tools=[WEATHER_ANTHROPIC],
        tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0},
    )
    assert message.stop_reason == "tool_use"
    assert [block.type for block in message.content] == ["tool_use"]


def test_required_calls_end_at_the_first_repeat():
    response = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Where is order A-1042?"}], tools=[FINAL_RESULT],
        tool_choice="required", temperature=0,
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls", f"{response.usage.completion_tokens} tokens"
    calls = [(call.function.name, json.loads(call.function.arguments)) for call in choice.message.tool_calls]
    assert calls
    assert all(calls[i] != calls[j] for i in range(len(calls)) for j in range(i)), calls
    # One call and the repeat that ended them, each a few dozen tokens: not the 2,048 budget.
    assert response.usage.completion_tokens < 60 * (len(calls) + 1)


# ---- JSON mode is an object ---------------------------------------------------------------------


# Every field optional: any object validates, a bare number does not.
class Price(BaseModel):
    product: str | None = None
    price: float | None = None


def test_instructor_json_mode_answers_an_object():
    client = instructor.from_openai(openai_client, mode=instructor.Mode.JSON)
    price, completion = client.chat.completions.create_with_completion(
        model=MODEL, response_model=Price, max_retries=0, temperature=0, max_tokens=200,
        messages=[{"role": "user", "content": EXTRACT_QUESTION}],
    )
    assert isinstance(price, Price)
    assert isinstance(json.loads(completion.choices[0].message.content), dict)


def test_langchain_json_mode_answers_an_object():
    llm = ChatOpenAI(base_url=f"{BASE}/v1", api_key="unused", model=MODEL, temperature=0, max_tokens=200,
                     max_retries=0)
    answer = llm.with_structured_output(method="json_mode").invoke(COUNT_QUESTION)
    assert isinstance(answer, dict)


def test_every_json_mode_answers_an_object():
    messages = [{"role": "user", "content": PRICE_QUESTION}]
    answers = {}
    for label, extra in (("json_object", {"response_format": {"type": "json_object"}}),
                         ("llamay_format", {"extra_body": {"llamay_format": "json"}})):
        response = openai_client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=200, temperature=0, **extra)
        answers[f"openai {label}"] = response.choices[0].message.content
    message = anthropic_client.messages.create(
        model=MODEL, max_tokens=200, messages=messages, extra_body={"temperature": 0, "llamay_format": "json"})
    answers["anthropic llamay_format"] = message.content[0].text
    chat = ollama_client.chat(model=MODEL, messages=messages, format="json",
                              options={"temperature": 0, "num_predict": 200})
    answers["ollama chat format"] = chat.message.content
    generated = ollama_client.generate(model=MODEL, prompt=PRICE_QUESTION, format="json",
                                       options={"temperature": 0, "num_predict": 200})
    answers["ollama generate format"] = generated.response
    for label, text in answers.items():
        assert isinstance(json.loads(text), dict), f"{label}: {text!r}"


def test_llamay_run_json_prints_an_object():
    out = subprocess.run(
        [BIN, "run", "-m", MODEL, "-json", "-temp", "0", "-n", "200", "-t", "1", "-p", SUM_QUESTION],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert isinstance(json.loads(out), dict), out


# ---- /api/show and /api/tags capabilities ---------------------------------------------------


def test_show_reports_a_chat_model_as_completion_and_tools():
    capabilities = ollama_client.show(MODEL).capabilities
    assert "completion" in capabilities and "tools" in capabilities
    assert not {"embedding", "insert", "vision"} & set(capabilities), capabilities


def test_show_and_tags_report_an_embedding_model_as_embedding():
    if EMBEDDING_MODEL not in installed_models():
        pytest.skip(f"{EMBEDDING_MODEL} is not installed (scripts/setup installs it)")
    assert ollama_client.show(EMBEDDING_MODEL).capabilities == ["embedding"]
    listed = {m["name"]: m for m in requests.get(f"{BASE}/api/tags", timeout=10).json()["models"]}
    assert listed[EMBEDDING_MODEL]["capabilities"] == ["embedding"]
    assert "tools" in listed[MODEL]["capabilities"]


# ---- text streams while tools are offered ---------------------------------------------------


def test_openai_text_streams_in_pieces_while_tools_are_offered():
    chunks = list(openai_client.chat.completions.create(
        model=MODEL, messages=TEXT_QUESTION, tools=[WEATHER], temperature=0, max_tokens=60, stream=True))
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 1, pieces


def test_anthropic_text_streams_in_pieces_while_tools_are_offered():
    with anthropic_client.messages.stream(
        model=MODEL, max_tokens=60, messages=TEXT_QUESTION, tools=[WEATHER_ANTHROPIC], extra_body={"temperature": 0},
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["text"]
    pieces = [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    assert len(pieces) > 1, pieces


def test_ollama_text_streams_in_pieces_while_tools_are_offered():
    chunks = list(ollama_client.chat(model=MODEL, messages=TEXT_QUESTION, tools=[WEATHER], stream=True,
                                     options={"temperature": 0, "num_predict": 60}))
    assert not any(c.message.tool_calls for c in chunks)
    pieces = [c.message.content for c in chunks if not c.done and c.message.content]
    assert len(pieces) > 1, pieces


# ---- Anthropic forced-tool streams; budgets too small for a call -----------------------------


def sse_events(response):
    events, name = [], None
    for line in response.iter_lines(decode_unicode=True):
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[len("data: "):])))
    return events


def test_anthropic_forced_tool_stream_begins_with_the_tool_use_block():
    body = {"model": MODEL, "max_tokens": 80, "stream": True, "temperature": 0, "messages": ASK_WEATHER,
            "tools": [WEATHER_ANTHROPIC], "tool_choice": {"type": "tool", "name": "get_weather"}}
    with requests.post(f"{BASE}/v1/messages", json=body, stream=True, timeout=120) as response:
        assert response.status_code == 200
        events = [(name, data) for name, data in sse_events(response) if name != "ping"]
    assert [name for name, _ in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"]
    start = events[1][1]
    assert start["index"] == 0 and start["content_block"]["type"] == "tool_use"
    assert start["content_block"]["name"] == "get_weather"
    assert events[2][1]["delta"]["type"] == "input_json_delta"
    assert events[4][1]["delta"]["stop_reason"] == "tool_use"


@pytest.mark.parametrize("budget", [1, 4, 8])
def test_a_named_call_cut_off_before_its_name_still_names_the_tool(budget):
    response = openai_client.chat.completions.create(
        model=MODEL, messages=ASK_WEATHER, tools=[TIME, WEATHER], temperature=0, max_tokens=budget,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        # The cut itself (a budget below the call's shortest form is refused when calls close).
        extra_body={"llamay_close_on_budget": False})
    choice = response.choices[0]
    assert choice.finish_reason == "length"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert call.function.arguments == "" or call.function.arguments.startswith("{")

    request = dict(model=MODEL, max_tokens=budget, messages=ASK_WEATHER,
                   extra_body={"temperature": 0, "llamay_close_on_budget": False},
                   tools=[WEATHER_ANTHROPIC], tool_choice={"type": "tool", "name": "get_weather"})
    message = anthropic_client.messages.create(**request)
    assert message.stop_reason == "max_tokens"
    assert [(block.type, block.name) for block in message.content] == [("tool_use", "get_weather")]
    with anthropic_client.messages.stream(**request) as stream:
        list(stream)
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens"
    assert [(block.type, block.name) for block in final.content] == [("tool_use", "get_weather")]


def test_required_with_a_budget_too_small_to_name_any_tool_is_refused():
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client.chat.completions.create(
            model=MODEL, messages=ASK_WEATHER, tools=[TIME, WEATHER], tool_choice="required", max_tokens=2)
    assert "max_tokens" in str(refused.value)
    with pytest.raises(anthropic.BadRequestError) as refused:
        anthropic_client.messages.create(
            model=MODEL, max_tokens=2, messages=ASK_WEATHER, tool_choice={"type": "any"},
            tools=[WEATHER_ANTHROPIC, {"name": "get_time", "input_schema": TIME["function"]["parameters"]}])
    assert "max_tokens" in str(refused.value)
