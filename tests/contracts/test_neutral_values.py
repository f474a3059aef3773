"""`Neutral`: a field taken only at null or its no-op values, and a schema that says exactly that."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from contracts.neutral_values import Neutral, value_schema
from contracts.openai_wire.schemas import ChatCompletionRequest, CompletionRequest


class Body(BaseModel):
    model_config = ConfigDict(strict=True)

    n: Annotated[Any, Neutral(1)] = None
    penalty: Annotated[Any, Neutral(0, 0.0)] = None
    tools: Annotated[Any, Neutral([])] = None
    response_format: Annotated[Any, Neutral({"type": "text"})] = None


@pytest.mark.parametrize(
    "body",
    [{}, {"n": None}, {"n": 1}, {"penalty": 0}, {"penalty": 0.0}, {"tools": []}, {"response_format": {"type": "text"}}],
)
def test_null_and_the_neutral_values_are_taken(body: dict[str, Any]) -> None:
    Body.model_validate(body)


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ({"n": 2}, "null or 1"),
        ({"n": 1.0}, "null or 1"),  # a float is not the integer 1
        ({"n": True}, "null or 1"),
        ({"penalty": False}, "null or 0 or 0.0"),
        ({"tools": [{}]}, "null or []"),
        ({"response_format": {"type": "json_object"}}, 'null or {"type": "text"}'),
    ],
)
def test_any_other_value_is_refused_naming_what_is_taken(body: dict[str, Any], shown: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Body.model_validate(body)
    assert refused.value.errors()[0]["msg"] == f"not supported by this gateway: omit it or send {shown}"


def test_the_schema_admits_exactly_those_values() -> None:
    properties = Body.model_json_schema()["properties"]
    assert properties["n"]["anyOf"] == [{"type": "null"}, {"type": "integer", "const": 1}]
    assert properties["penalty"]["anyOf"] == [
        {"type": "null"}, {"type": "integer", "const": 0}, {"type": "number", "const": 0.0}
    ]  # fmt: skip
    assert properties["tools"]["anyOf"] == [{"type": "null"}, {"type": "array", "maxItems": 0}]
    assert value_schema({}) == {"type": "object", "properties": {}, "additionalProperties": False}
    assert value_schema({"type": "text"}) == {
        "type": "object",
        "properties": {"type": {"type": "string", "const": "text"}},
        "additionalProperties": False,
        "required": ["type"],
    }


def test_no_openai_field_is_documented_as_taking_anything() -> None:
    """Every field of the OpenAI bodies has a schema; none is `{}` (anything), which a client
    (or a fuzzer) would read as a promise the gateway does not keep."""
    for model in (CompletionRequest, ChatCompletionRequest):
        schema = model.model_json_schema()
        bodies = [schema, *schema.get("$defs", {}).values()]
        for body in bodies:
            for name, field in body.get("properties", {}).items():
                assert set(field) - {"title", "default", "description"}, (model.__name__, name, field)
