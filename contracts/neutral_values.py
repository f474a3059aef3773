"""OpenAI fields this gateway cannot honour, accepted only at the no-op values clients send.

An SDK or a tool built on it sends `n: 1`, `echo: false`, `tools: []` by default; refusing those
would refuse the client, and honouring anything else is impossible here. So such a field takes
null or one of its neutral values, and any other value is a 400 naming the field. The OpenAPI
document shows exactly those values (a schema of `Any` would promise more than the gateway
takes):

    n: Annotated[Any, Neutral(1)] = None     schema: null, or the integer 1
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema


class Neutral:
    """Annotation for a field accepted only at null or one of `allowed` (type and value alike:
    `0.0` is not `false`, `1.0` is not `1`)."""

    __slots__ = ("allowed",)

    def __init__(self, *allowed: object) -> None:
        self.allowed = allowed

    def check(self, value: object) -> object:
        if value is None or any(value == a and type(value) is type(a) for a in self.allowed):
            return value
        shown = " or ".join(["null", *(json.dumps(a) for a in self.allowed)])
        raise PydanticCustomError(
            "unsupported_value", "not supported by this gateway: omit it or send {shown}", {"shown": shown}
        )

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"anyOf": [{"type": "null"}, *(value_schema(a) for a in self.allowed)]}


def value_schema(value: object) -> dict[str, Any]:
    """The JSON schema that admits `value` and nothing else a strict reader would take for
    another value (a JSON `1` and `1.0` are one number to JSON Schema, so an integer says so)."""
    if isinstance(value, bool):
        return {"type": "boolean", "const": value}
    if isinstance(value, int):
        return {"type": "integer", "const": value}
    if isinstance(value, float):
        return {"type": "number", "const": value}
    if isinstance(value, str):
        return {"type": "string", "const": value}
    if isinstance(value, list) and not value:
        return {"type": "array", "maxItems": 0}
    if isinstance(value, dict):
        properties = {key: value_schema(item) for key, item in value.items()}
        schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
        return schema | ({"required": list(properties)} if properties else {})
    raise TypeError(f"no schema for a neutral value of type {type(value).__name__}")
