"""Tool calls: OpenAI's `tools` and `tool_choice`, the grammar that holds a reply to a call, and
the one text form a call takes in the model's own words.

The model writes a call as one line, compact JSON between two markers, the function's name
first (the grammar fixes the order, so a reply can be read, and streamed, as it is written):

    <tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>

    tool_choice   grammar (llguidance's Lark)                           the reply
    "none"        none                                                  text
    "auto"        start: call | TEXT     TEXT: any text not starting    text, or one call
                                         with the marker
    "required"    start: call                                           one call of any tool
    {"function": {"name": N}}  start: call, with N's rule only          one call of N

    call: "<tool_call>" (fn_0 | fn_1 | ...) "</tool_call>"
    fn_i: "{\"name\":\"<name i>\",\"arguments\":" args_i "}"
    args_i: %json <tool i's parameters schema>     (each schema its own root: `$ref`s hold)

One call a reply (`parallel_tool_calls` is accepted: one call is always an allowed answer).
The same form renders a conversation's earlier calls for templates that know no tools
(contracts/openai_wire/chat_template.py), so the model reads calls as it is asked to write them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import llguidance
from pydantic import ConfigDict, Field

from contracts.field_checks import UnicodeChecked
from contracts.guided_grammar import JSON_DEFAULTS
from contracts.openai_wire.response_format import FunctionName

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
CALL_HEAD = '{"name":"'
ARGUMENTS_KEY = '","arguments":'
CALL_TAIL = "}" + CALL_CLOSE
# A function without `parameters` takes none (OpenAI's rule): its arguments are `{}`.
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


class _Strict(UnicodeChecked):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class FunctionSpec(_Strict):
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(_Strict):
    type: Literal["function"]
    function: FunctionSpec


class FunctionRef(_Strict):
    name: FunctionName


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: FunctionRef


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice
Tools = Annotated[list[ToolSpec], Field(max_length=128)]


def tools_problem(tools: list[ToolSpec] | None, choice: ToolChoice | None) -> tuple[str, str] | None:
    """(param, what is wrong) when `tools` and `tool_choice` do not go together; None if they do."""
    names = [tool.function.name for tool in tools or ()]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        return "tools", f"function {repeated[0]!r} is defined twice: names must be unique"
    if choice in (None, "none", "auto"):
        return None
    if not names:
        return "tool_choice", "needs tools: send the functions the reply may call in `tools`"
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        return "tool_choice", f"names function {choice.function.name!r}, which is not one of tools: {', '.join(names)}"
    return None


def tool_choice_of(tools: list[ToolSpec] | None, choice: ToolChoice | None) -> ToolChoice:
    """The choice in force: OpenAI's default is "auto" with tools, "none" without."""
    if not tools:
        return "none"
    return choice if choice is not None else "auto"


def tool_call_grammar(tools: list[ToolSpec], choice: ToolChoice) -> str | None:
    """The grammar of a reply under `choice` (see the module docstring); None for "none"."""
    if choice == "none" or not tools:
        return None
    chosen = tools
    if isinstance(choice, NamedToolChoice):
        chosen = [tool for tool in tools if tool.function.name == choice.function.name]
    lines = ["start: call | TEXT" if choice == "auto" else "start: call"]
    lines.append(f"call: {_lark_string(CALL_OPEN)} ({' | '.join(f'fn_{i}' for i in range(len(chosen)))}) "
                 f"{_lark_string(CALL_CLOSE)}")  # fmt: skip
    for i, tool in enumerate(chosen):
        function = tool.function
        head = _lark_string(CALL_HEAD + function.name + ARGUMENTS_KEY)
        lines.append(f"fn_{i}: {head} args_{i} {_lark_string('}')}")
        lines.append(f"args_{i}: %json {_schema_text(function)}")
    if choice == "auto":
        # Any text but one that starts with the marker: a reply that starts it is a call, whole.
        lines.append(f"TEXT: /(?s:.*)/ & ~/{_regex_literal(CALL_OPEN)}(?s:.*)/")
    return "\n".join(lines) + "\n"


def call_text(name: str, arguments: str) -> str:
    """A call in the model's form (an earlier call in a conversation): arguments compacted when
    they are JSON, else as the caller sent them."""
    try:
        compact = json.dumps(json.loads(arguments), separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        compact = arguments
    return f"{CALL_OPEN}{CALL_HEAD}{name}{ARGUMENTS_KEY}{compact}{CALL_TAIL}"


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """A reply read as a call: the function's name and its arguments' JSON text (cut short when
    the reply ran out of tokens: `complete` False)."""

    name: str
    arguments: str
    complete: bool


def parse_call(text: str) -> ParsedCall | None:
    """The call `text` holds (the grammar's form), or None when it is text (or too short to name
    a function yet)."""
    if not text.startswith(CALL_OPEN + CALL_HEAD):
        return None
    rest = text[len(CALL_OPEN + CALL_HEAD) :]
    name, found, arguments = rest.partition(ARGUMENTS_KEY)
    if not found:
        return None
    complete = arguments.endswith(CALL_TAIL)
    return ParsedCall(name, arguments.removesuffix(CALL_TAIL) if complete else arguments, complete)


def _schema_text(function: FunctionSpec) -> str:
    schema = function.parameters if function.parameters is not None else NO_PARAMETERS
    lenient = {} if function.strict else {"lenient": True}
    options = {**JSON_DEFAULTS, **lenient, **dict(schema.get("x-guidance") or {})}
    return json.dumps({**schema, "x-guidance": options}, separators=(",", ":"))


def _lark_string(text: str) -> str:
    """`text` as a Lark string literal (JSON's escapes are Lark's)."""
    return json.dumps(text)


def _regex_literal(text: str) -> str:
    """`text` matched literally inside a Lark `/.../` regex."""
    return llguidance.regex_to_lark(re.escape(text), "")
