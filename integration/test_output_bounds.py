"""Answers that cannot run to the end of the context (issue 9): JSON mode's numbers have bounded
digits, and a request without max_tokens gets the daemon's default budget (default_max_tokens,
2048 unless configured), through the official openai client.

The prompt is instructor's JSON mode (a schema in the system message, `json_object`, no
max_tokens), with which SmolLM2 once wrote `100.00000000000000120000...` for 3,938 tokens.
"""

import json

import openai

from conftest import BASE, MODEL

client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0)

ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "total": {"type": "number"},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "price": {"type": "number"}, "quantity": {"type": "integer"}}}},
    },
    "required": ["order_id", "total", "items"],
}
INSTRUCTOR_SYSTEM = (
    "As a genius expert, your task is to understand the content and provide the parsed objects in json "
    f"that match the following json_schema:\n\n{json.dumps(ORDER_SCHEMA, indent=2)}\n\n"
    "Make sure to return an instance of the JSON, not the schema itself"
)
DEFAULT_MAX_TOKENS = 2048


def test_json_object_without_max_tokens_ends_with_a_bounded_valid_document():
    response = client.chat.completions.create(
        model=MODEL, response_format={"type": "json_object"}, temperature=0,
        messages=[
            {"role": "system", "content": INSTRUCTOR_SYSTEM},
            {"role": "user", "content": "Order A-1042: 2 lamps at 49.99 and a desk at 100 dollars."},
        ],
    )
    choice = response.choices[0]
    assert response.usage.completion_tokens <= DEFAULT_MAX_TOKENS
    assert choice.finish_reason == "stop", f"{response.usage.completion_tokens} tokens: {choice.message.content[:300]}"
    # Every number as written: at most 16 integer and 16 fraction digits.
    literals = []
    json.loads(choice.message.content, parse_float=lambda t: literals.append(t) or float(t),
               parse_int=lambda t: literals.append(t) or int(t))
    for literal in literals:
        mantissa = literal.lstrip("-").lower().split("e")[0]
        integer, _, fraction = mantissa.partition(".")
        assert len(integer) <= 16 and len(fraction) <= 16, literal
