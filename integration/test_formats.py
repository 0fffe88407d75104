"""`format` enforced on request: with `llamay_formats: "enforce"` a pydantic model with `datetime`,
`EmailStr` and `UUID` fields round-trips through the openai client's `parse` on every seed."""

import datetime
import uuid

import openai
import pydantic
import pytest

from conftest import BASE, MODEL

client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0)

MESSAGES = [
    {"role": "system", "content": "Extract the sign-up as a JSON object. Return only the object."},
    {
        "role": "user",
        "content": "Jane Doe signed up on 3 March 2024 at 14:05 UTC with jane.doe@example.org; "
        "her account id is 9b2f4c1e-8d3a-4f6b-a1c2-3e4d5f6a7b8c.",
    },
]


class Signup(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=40)
    email: pydantic.EmailStr
    account_id: uuid.UUID
    signed_up_at: datetime.datetime


def test_the_schema_carries_the_three_formats():
    properties = Signup.model_json_schema()["properties"]
    assert [properties[k]["format"] for k in ("email", "account_id", "signed_up_at")] == ["email", "uuid", "date-time"]


@pytest.mark.parametrize("seed", range(10))
def test_datetime_email_and_uuid_fields_round_trip_with_formats_enforced(seed):
    completion = client.beta.chat.completions.parse(
        model=MODEL,
        messages=MESSAGES,
        response_format=Signup,
        max_tokens=300,
        temperature=0.8,
        extra_body={"llamay_formats": "enforce", "seed": seed},
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    signup = choice.message.parsed
    assert isinstance(signup, Signup), choice.message.content
    assert isinstance(signup.account_id, uuid.UUID)
    assert isinstance(signup.signed_up_at, datetime.datetime)
    assert "@" in signup.email


def test_an_unknown_formats_value_is_a_400_naming_it():
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=5, extra_body={"llamay_formats": "strict"}
        )
    assert "llamay_formats" in str(refused.value)
