"""A conversation with tools, for chat templates that know none (the built models' Llama 2
template among them): the tools, earlier calls and their results written as ordinary messages
in the one form the model is held to when it calls (contracts/openai_wire/tool_calls.py).

    tools (tool_choice not "none")  appended to the first system message (one is added when
                                    there is none):
                                      You can call these functions. To call one, reply with
                                      nothing else but:
                                      <tool_call>{"name":NAME,"arguments":{...}}</tool_call>
                                      Functions: [{"name", "description", "parameters"}, ...]
    an assistant's tool_calls       its text, then each call in that form
    tool messages                   a user message (consecutive ones joined), each result as
                                      <tool_response>{"tool_call_id":ID,"content":TEXT}</tool_response>

A template that knows tools (its source uses `tools`) is given them as HF's templates take
them instead (`tools=[...]`, messages with `tool_calls` and `tool_call_id`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contracts.openai_wire.tool_calls import CALL_CLOSE, CALL_HEAD, CALL_OPEN, ToolSpec, call_text

RESPONSE_OPEN = "<tool_response>"
RESPONSE_CLOSE = "</tool_response>"


@dataclass(frozen=True, slots=True)
class CallInMessage:
    """An earlier call, as an assistant message held it."""

    id: str
    name: str
    arguments: str  # JSON text


def tools_instruction(tools: Sequence[ToolSpec]) -> str:
    """What the model is told about the tools it may call, and how to call one."""
    functions = [
        {key: value for key, value in tool.function.model_dump(exclude={"strict"}).items() if value is not None}
        for tool in tools
    ]
    form = f'{CALL_OPEN}{CALL_HEAD}NAME","arguments":{{...}}}}{CALL_CLOSE}'
    return (
        "You can call these functions. To call one, reply with nothing else but:\n"
        f"{form}\nFunctions: {json.dumps(functions, ensure_ascii=False, separators=(',', ':'))}"
    )


def assistant_text(content: str, calls: Sequence[CallInMessage]) -> str:
    """An assistant message's text with its calls written out."""
    return content + "".join(call_text(call.name, call.arguments) for call in calls)


def tool_response_text(tool_call_id: str, content: str) -> str:
    """One tool result as the model reads it."""
    body = json.dumps({"tool_call_id": tool_call_id, "content": content}, ensure_ascii=False, separators=(",", ":"))
    return f"{RESPONSE_OPEN}{body}{RESPONSE_CLOSE}"


def template_calls(calls: Sequence[CallInMessage]) -> list[dict[str, Any]]:
    """Calls as HF templates take them (arguments as an object when they are JSON)."""
    return [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": _as_json(call.arguments)}}
        for call in calls
    ]


def _as_json(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text
