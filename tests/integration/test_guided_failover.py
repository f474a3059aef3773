"""Failover keeps a grammar exact (issue 32): a `tritonserver` SIGKILLed while it writes
JSON-schema replies and tool calls; each cut reply resumes on the other server with the same
grammar state, so it comes back token for token what an uninterrupted run writes (greedy),
and still parses and validates. (NVIDIA Dynamo turned migration off for guided decoding after
migrated replies came back as broken JSON: ai-dynamo/dynamo#7634.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from .conftest import LiveGateway
from .test_failover_e2e import Fleet, _llm_requests, fleet, kill_while_held  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration

STREAMS = 4
# Long strings, so that every reply is still being written when the kill lands: the grammar
# holds the model to them, and the JSON closes only after.
STORY = {"type": "string", "minLength": 1200, "maxLength": 1300}
SCHEMA = {"type": "object", "properties": {"story": STORY}, "required": ["story"], "additionalProperties": False}
TOOL = {
    "type": "function",
    "function": {
        "name": "file_report",
        "parameters": {
            "type": "object",
            "properties": {"report": STORY},
            "required": ["report"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
MAX_TOKENS = 1800


def _json_reply(url: str, headers: dict[str, str], prompt: str, started: threading.Event) -> dict[str, Any]:
    """A streamed /v1/generate reply held to SCHEMA: its token ids and text."""
    response_format = {"type": "json_schema", "json_schema": {"name": "report", "schema": SCHEMA, "strict": True}}
    body = {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.0, "stream": True,
            "response_format": response_format}  # fmt: skip
    text: list[str] = []
    token_ids: list[int] = []
    final: dict[str, Any] | None = None
    with httpx.stream("POST", f"{url}/v1/generate", json=body, headers=headers, timeout=180) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line.removeprefix("data: "))
            if "usage" in event:
                final = event
                continue
            text.append(event.get("text", ""))
            token_ids.extend(event.get("token_ids", []))
            if len(token_ids) >= 2:
                started.set()
    assert final is not None and final["stop_reason"] == "stop", final
    return {"text": "".join(text), "token_ids": token_ids}


def _tool_call(url: str, headers: dict[str, str], prompt: str, started: threading.Event) -> dict[str, Any]:
    """A whole chat reply that must call TOOL: its arguments."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": MAX_TOKENS,
            "temperature": 0.0, "tools": [TOOL], "tool_choice": "required"}  # fmt: skip
    started.set()  # a whole reply: the engines' gauges tell when it is held
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=180)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "file_report"
    return {"arguments": call["function"]["arguments"]}


def _valid_story(text: str) -> None:
    value = json.loads(text)
    assert set(value) == {"story"} and 1200 <= len(value["story"]) <= 1300, text[:200]


def _valid_report(arguments: str) -> None:
    value = json.loads(arguments)
    assert set(value) == {"report"} and 1200 <= len(value["report"]) <= 1300, arguments[:200]


@pytest.mark.parametrize("kind", ["json_schema", "tool_call"])
def test_a_server_killed_mid_reply_keeps_the_grammar_exact(
    fleet: Fleet,  # noqa: F811 - the fixture imported above
    live_gateway: LiveGateway,
    kind: str,
) -> None:
    url, headers = live_gateway.url, live_gateway.headers
    call: Callable[[str, dict[str, str], str, threading.Event], dict[str, Any]]
    call = _json_reply if kind == "json_schema" else _tool_call
    prompts = [f"a report on river number {i}" for i in range(STREAMS)]
    with ThreadPoolExecutor(STREAMS) as pool:
        reference = list(pool.map(lambda p: call(url, headers, p, threading.Event()), prompts))
        received = {name: _llm_requests(server)[0] for name, server in fleet.servers.items()}
        started = [threading.Event() for _ in prompts]
        futures = [pool.submit(call, url, headers, p, e) for p, e in zip(prompts, started, strict=True)]
        log = live_gateway.config.var_path / "logs" / "gw.log"
        failovers_before = log.read_text().count("trying another")
        kill_while_held(fleet, STREAMS, received, started)
        replies = [future.result(timeout=180) for future in futures]
    assert log.read_text().count("trying another") > failovers_before  # replies really were cut
    for index, (got, want) in enumerate(zip(replies, reference, strict=True)):
        assert got == want, f"reply {index}"  # token for token (the arguments: character for character)
        if kind == "json_schema":
            _valid_story(got["text"])
        else:
            _valid_report(got["arguments"])
