"""OpenAI's `response_format`, as chat, completions, `/v1/generate` and batch lines take it, and
the grammar each form constrains the reply with (contracts/guided_grammar.py):

    {"type": "text"}                                   None: unconstrained
    {"type": "json_object"}                            json_object_grammar(): any JSON object
    {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
                                                       json_schema_grammar(schema, lenient=not strict)

`strict: true` holds the reply to every keyword of the schema: one llguidance cannot enforce is
the caller's 400 (with llguidance's reason) rather than a constraint the reply silently skips;
without it (OpenAI's default) such keywords are ignored. A schema's validity is checked where
the request is accepted (serving/generation.py), not here: compiling is the costly part, done
off the event loop and cached.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from contracts.field_checks import UnicodeChecked
from contracts.guided_grammar import json_object_grammar, json_schema_grammar

# OpenAI's rule for the names of schemas and functions.
NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
FunctionName = Annotated[str, Field(pattern=NAME_PATTERN)]


class _Strict(UnicodeChecked):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class TextFormat(_Strict):
    type: Literal["text"]

    def grammar(self) -> str | None:
        return None


class JsonObjectFormat(_Strict):
    type: Literal["json_object"]

    def grammar(self) -> str | None:
        return json_object_grammar()


class JsonSchemaSpec(_Strict):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)

    name: FunctionName
    description: str | None = None
    # `schema` shadows a BaseModel attribute: held as `json_schema`, named `schema` on the wire.
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class JsonSchemaFormat(_Strict):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec

    def grammar(self) -> str | None:
        spec = self.json_schema
        # No schema: any JSON value, as OpenAI takes it.
        return json_schema_grammar(spec.json_schema or {}, lenient=not spec.strict)


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]
