"""Input that used to end in a 5xx or take servers out of routing: text that is not valid
Unicode, and a model server's refusal of a request's input. Each is the caller's 400."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from contracts.generation import RequestRejected
from tests.gateway.conftest import FakeBackend

LONE = "\\ud800"  # as JSON spells it: decodes to a str that cannot be encoded as UTF-8


def raw(body: str) -> dict[str, Any]:
    return {"content": body.encode(), "headers": {"Content-Type": "application/json"}}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/generate", f'{{"model": "small", "prompt": "a{LONE}b", "max_tokens": 3}}', "prompt"),
        ("/v1/generate", f'{{"model": "small", "prompt": "ab", "max_tokens": 3, "stop": ["{LONE}"]}}', "stop.0"),
        ("/v1/completions", f'{{"model": "small", "prompt": ["x{LONE}"], "max_tokens": 3}}', "prompt"),
        ("/v1/completions", f'{{"model": "small", "prompt": "x", "max_tokens": 3, "user": "{LONE}"}}', "user"),
        (
            "/v1/chat/completions",
            f'{{"model": "small", "messages": [{{"role": "user", "content": "hi {LONE}"}}], "max_tokens": 3}}',
            "messages.0.content",
        ),
        (
            "/v1/chat/completions",
            f'{{"model": "small", "messages": [{{"role": "user", "content": [{{"type": "text", "text": "{LONE}"}}]}}]}}',  # noqa: E501
            "messages.0.content",
        ),
        (
            "/v1/chat/completions",
            f'{{"model": "small", "messages": [{{"role": "user", "content": "hi"}}], "metadata": {{"{LONE}": "v"}}}}',
            "metadata",
        ),
    ],
)
async def test_text_that_is_not_valid_unicode_is_a_400_naming_the_field(
    client: httpx.AsyncClient, backend: FakeBackend, path: str, body: str, param: str
) -> None:
    json.loads(body)  # the body itself is valid JSON
    response = await client.post(path, **raw(body))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert "unicode" in error["message"].lower()
    assert backend.requests == []


@pytest.mark.parametrize("stream", [False, True])
async def test_a_model_servers_refusal_of_the_input_is_a_400_not_a_5xx(
    client: httpx.AsyncClient, backend: FakeBackend, stream: bool
) -> None:
    backend.error_after = 0
    backend.error = RequestRejected("cpu_engine: 9000 prompt tokens leave no room in the model's context of 8192")
    body = {"model": "small", "prompt": "the fox", "max_tokens": 3, "stream": stream}
    response = await client.post("/v1/generate", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "the model server refused this request: cpu_engine: 9000 prompt tokens" in error["message"]


async def test_a_refusal_is_a_400_on_the_openai_routes_too(client: httpx.AsyncClient, backend: FakeBackend) -> None:
    backend.error_after = 0
    backend.error = RequestRejected("top_p must be in (0, 1], got 0.0")
    response = await client.post("/v1/completions", json={"model": "small", "prompt": "the fox", "max_tokens": 3})
    assert response.status_code == 400, response.text
    assert "top_p must be in (0, 1]" in response.json()["error"]["message"]
