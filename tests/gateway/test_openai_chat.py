"""POST /v1/chat/completions against the FakeBackend: the prompt is the model's chat template,
replies are OpenAI's chat objects, whole and streamed, and bad messages are 400s."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from contracts.openai_wire.schemas import CHAT_DEFAULT_MAX_TOKENS

Sse = Callable[[str], list[tuple[str | None, Any]]]

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the quick fox"}]
BODY: dict[str, Any] = {"model": "small", "messages": MESSAGES, "max_tokens": 9}
RENDERED = "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nthe quick fox [/INST]"

pytestmark = pytest.mark.usefixtures("chat_template")


async def test_whole_reply_is_a_chat_completion(
    client: httpx.AsyncClient, backend: Any, count_tokens: Callable[[str], int]
) -> None:
    response = await client.post("/v1/chat/completions", json=BODY, headers={"X-Request-Id": "chat-1"})
    assert response.status_code == 200, response.text
    reply = response.json()
    prompt_tokens = count_tokens(RENDERED)
    assert reply == {
        "id": "chatcmpl-chat-1",
        "object": "chat.completion",
        "created": reply["created"],
        "model": "small",
        "service_tier": "default",  # the team's default tier served it
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello, world"},
                "logprobs": None,
                "finish_reason": "length",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 4,
            "total_tokens": prompt_tokens + 4,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
    (sent,) = backend.requests
    assert (sent.prompt, sent.max_tokens, sent.request_id) == (RENDERED, 9, "alpha/chat-1")


async def test_stream_opens_with_the_role_and_ends_with_usage(client: httpx.AsyncClient, sse: Sse) -> None:
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    response = await client.post("/v1/chat/completions", json=body, headers={"X-Request-Id": "chat-2"})
    assert response.status_code == 200, response.text
    events = sse(response.text)
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    assert {(c["id"], c["object"]) for c in chunks} == {("chatcmpl-chat-2", "chat.completion.chunk")}
    assert [(c["choices"][0]["delta"], c["choices"][0]["finish_reason"]) for c in chunks[:-1]] == [
        ({"role": "assistant", "content": ""}, None),
        ({"role": None, "content": "Hello"}, None),
        ({"role": None, "content": ", "}, None),
        ({"role": None, "content": "world"}, None),
        ({"role": None, "content": None}, "length"),
    ]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 4


async def test_max_tokens_defaults_to_the_rest_of_the_context_up_to_a_long_reply(
    app: FastAPI, client: httpx.AsyncClient, backend: Any, count_tokens: Callable[[str], int]
) -> None:
    for model in ("small", "large"):
        response = await client.post("/v1/chat/completions", json={"model": model, "messages": MESSAGES})
        assert response.status_code == 200, response.text
    small_context = app.state.services.catalog.get("small").max_context_tokens
    assert backend.requests[0].max_tokens == small_context - count_tokens(RENDERED)  # 64: the rest
    assert backend.requests[1].max_tokens == CHAT_DEFAULT_MAX_TOKENS  # 36,864: capped


async def test_max_completion_tokens_is_max_tokens(client: httpx.AsyncClient, backend: Any) -> None:
    body = {"model": "small", "messages": MESSAGES, "max_completion_tokens": 5}
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    assert (await client.post("/v1/chat/completions", json={**body, "max_tokens": 5})).status_code == 200
    assert [r.max_tokens for r in backend.requests] == [5, 5]


async def test_text_parts_developer_role_and_neutral_fields(client: httpx.AsyncClient, backend: Any) -> None:
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "the quick"}, {"type": "text", "text": "fox"}]},
    ]
    neutral: dict[str, Any] = {
        "logprobs": False,
        "top_logprobs": None,
        "tools": [],
        "tool_choice": "none",
        "parallel_tool_calls": True,
        "response_format": {"type": "text"},
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "service_tier": "auto",
        "store": False,
        "metadata": {"k": "v"},
        "n": 1,
        "user": "u",
    }
    response = await client.post("/v1/chat/completions", json={**BODY, "messages": messages, **neutral})
    assert response.status_code == 200, response.text
    assert backend.requests[0].prompt == RENDERED.replace("the quick fox", "the quick\nfox")


async def test_an_assistant_reply_can_be_sent_back(client: httpx.AsyncClient, backend: Any) -> None:
    body = {**BODY, "model": "large"}
    first = (await client.post("/v1/chat/completions", json=body)).json()
    messages = [*MESSAGES, first["choices"][0]["message"], {"role": "user", "content": "more"}]
    response = await client.post("/v1/chat/completions", json={**body, "messages": messages})
    assert response.status_code == 200, response.text
    assert backend.requests[1].prompt.endswith(" Hello, world </s><s>[INST] more [/INST]")


TOOL = {"type": "function", "function": {"name": "f"}}


@pytest.mark.parametrize(
    ("patch", "param", "needle"),
    [
        ({"messages": []}, "messages", "at least 1"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0", "'user'"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.tool_call_id", "required"),
        ({"messages": [{"role": "user"}]}, "messages.0.content", "required"),
        ({"messages": [{"role": "user", "content": None}]}, "messages.0.content", "string"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages.0.content",
            "only text parts",
        ),
        ({"messages": [{"role": "user", "content": "x", "colour": "red"}]}, "messages.0.colour", "unrecognized"),
        ({"messages": [{"role": "assistant", "content": "I go first"}]}, "messages", "roles must alternate"),
        ({"max_completion_tokens": 5}, "max_completion_tokens", "differs from max_tokens (9)"),
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
        ({"tools": [TOOL, TOOL]}, "tools", "defined twice"),
        ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice", "'g'"),
        ({"top_logprobs": 2}, "top_logprobs", "needs logprobs: true"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "20"),
        ({"response_format": {"type": "xml"}}, "response_format", "xml"),
        ({"prompt": "hi"}, "prompt", "unrecognized field 'prompt'"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    client: httpx.AsyncClient, backend: Any, patch: dict[str, Any], param: str, needle: str
) -> None:
    response = await client.post("/v1/chat/completions", json={**BODY, **patch})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert needle in error["message"]
    assert backend.requests == []


async def test_a_model_without_a_template_is_a_400(client: httpx.AsyncClient, config_path: Path) -> None:
    (config_path.parent / "models" / "large" / "tokenizer_config.json").unlink()
    response = await client.post("/v1/chat/completions", json={**BODY, "model": "large"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "model"
    assert "has no chat_template" in error["message"] and "/v1/completions" in error["message"]


async def test_unknown_model_is_a_404_before_any_template(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json={**BODY, "model": "nope"})
    assert response.status_code == 404
    assert response.json()["error"]["param"] == "model"


async def test_a_conversation_too_long_for_the_context_is_a_400(client: httpx.AsyncClient) -> None:
    messages = [{"role": "user", "content": "the quick brown fox " * 20}]
    response = await client.post("/v1/chat/completions", json={"model": "small", "messages": messages})
    assert response.status_code == 400
    assert "shorten the prompt" in response.json()["error"]["message"]
