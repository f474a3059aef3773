"""POST /v1/completions against the scripted FakeBackend: OpenAI's shapes, whole and streamed,
the headers that carry class and request id, finish reasons, and what is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from contracts.generation import BackendError, GenerationDelta

Sse = Callable[[str], list[tuple[str | None, Any]]]

BODY: dict[str, Any] = {"model": "small", "prompt": "the quick brown fox", "max_tokens": 9}


async def test_whole_reply_is_a_text_completion(
    client: httpx.AsyncClient, backend: Any, count_tokens: Callable[[str], int]
) -> None:
    response = await client.post(
        "/v1/completions",
        json={**BODY, "stop": "\n", "temperature": 1, "top_p": 0.5, "seed": 7, "n": 1, "user": "u1"},
        headers={"X-Request-Id": "c-1", "X-Switchyard-Class": "bulk"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == "c-1"
    reply = response.json()
    prompt_tokens = count_tokens(BODY["prompt"])
    assert reply == {
        "id": "cmpl-c-1",
        "object": "text_completion",
        "created": reply["created"],
        "model": "small",
        "service_tier": "batch",  # X-Switchyard-Class: bulk
        "choices": [{"index": 0, "text": "Hello, world", "logprobs": None, "finish_reason": "length"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 4,
            "total_tokens": prompt_tokens + 4,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
    (sent,) = backend.requests
    assert (sent.request_id, sent.request_class, sent.max_tokens, sent.stop) == ("alpha/c-1", "bulk", 9, ("\n",))
    assert (sent.temperature, sent.top_p, sent.seed, sent.top_k, sent.ignore_eos) == (1.0, 0.5, 7, None, False)


async def test_defaults_and_a_one_string_prompt_list(client: httpx.AsyncClient, backend: Any) -> None:
    body = {"model": "small", "prompt": ["the fox"], "top_k": 3, "ignore_eos": True}
    response = await client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    (sent,) = backend.requests
    assert sent.prompt == "the fox"
    assert sent.max_tokens == 16  # OpenAI's default for completions
    assert sent.request_class == "interactive"
    assert (sent.top_k, sent.ignore_eos) == (3, True)
    request_id = response.headers["x-request-id"]
    assert (response.json()["id"], sent.request_id) == (f"cmpl-{request_id}", f"alpha/{request_id}")


async def test_neutral_values_of_unsupported_fields_are_accepted(client: httpx.AsyncClient) -> None:
    neutral: dict[str, Any] = {
        "logprobs": None,
        "echo": False,
        "best_of": 1,
        "suffix": None,
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "logit_bias": {},
        "stop": None,
        "stream": False,
    }
    response = await client.post("/v1/completions", json={**BODY, **neutral})
    assert response.status_code == 200, response.text


async def test_stream_is_text_completion_chunks_then_done(client: httpx.AsyncClient, sse: Sse) -> None:
    response = await client.post("/v1/completions", json={**BODY, "stream": True}, headers={"X-Request-Id": "s-1"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse(response.text)
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    assert {c["id"] for c in chunks} == {"cmpl-s-1"}
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert [(c["choices"][0]["text"], c["choices"][0]["finish_reason"]) for c in chunks] == [
        ("Hello", None),
        (", ", None),
        ("world", None),
        ("", "length"),
    ]
    assert all(c["usage"] is None for c in chunks)


async def test_include_usage_adds_a_last_chunk_with_usage_and_no_choices(
    client: httpx.AsyncClient, sse: Sse, count_tokens: Callable[[str], int]
) -> None:
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    events = sse((await client.post("/v1/completions", json=body)).text)
    assert events[-1] == (None, "[DONE]")
    last = events[-2][1]
    assert last["choices"] == []
    assert last["usage"]["prompt_tokens"] == count_tokens(BODY["prompt"])
    assert last["usage"]["completion_tokens"] == 4
    assert events[-3][1]["choices"][0]["finish_reason"] == "length"


async def test_a_text_less_delta_sends_no_chunk(client: httpx.AsyncClient, backend: Any, sse: Sse) -> None:
    backend.deltas = [
        GenerationDelta(text="", token_ids=(200,)),  # half a character, held back
        GenerationDelta(text="é", token_ids=(201,), finish_reason="stop"),
    ]
    events = sse((await client.post("/v1/completions", json={**BODY, "stream": True})).text)
    assert [data["choices"][0]["text"] for _, data in events[:-1]] == ["é", ""]


async def test_a_cancelled_request_finishes_with_stop(
    client: httpx.AsyncClient, backend: Any, sse: Sse, registry: Any
) -> None:
    backend.hold_after = 1
    body = {**BODY, "stream": True}
    posting = asyncio.create_task(client.post("/v1/completions", json=body, headers={"X-Request-Id": "c-del"}))
    while registry.get("alpha/c-del") is None or not registry.get("alpha/c-del").deltas:
        await asyncio.sleep(0.01)
    cancelled = await client.delete("/v1/generate/c-del")
    assert cancelled.json()["status"] == "cancelled"
    events = sse((await posting).text)
    assert [data["choices"][0]["finish_reason"] for _, data in events[:-1]] == [None, "stop"]


async def test_an_engine_abort_is_an_error_not_a_finish_reason(
    client: httpx.AsyncClient, backend: Any, sse: Sse
) -> None:
    backend.deltas = [GenerationDelta(text="Hi", token_ids=(5,)), GenerationDelta(finish_reason="aborted")]
    whole = await client.post("/v1/completions", json=BODY)
    assert whole.status_code == 502
    assert "aborted" in whole.json()["error"]["message"]
    events = sse((await client.post("/v1/completions", json={**BODY, "stream": True})).text)
    assert events[0][1]["choices"][0]["text"] == "Hi"
    assert events[-1] == (
        "error",
        {
            "error": {
                "type": "server_error",
                "message": whole.json()["error"]["message"],
                "param": None,
                "code": "backend_error",
            }
        },
    )


async def test_a_failure_before_any_text_is_an_honest_status(client: httpx.AsyncClient, backend: Any) -> None:
    backend.error_after = 0
    backend.error = BackendError("engine failed")
    for stream in (False, True):
        response = await client.post("/v1/completions", json={**BODY, "stream": stream})
        assert response.status_code == 502
        assert response.json()["error"] == {
            "type": "server_error",
            "message": "engine failed",
            "param": None,
            "code": "backend_error",
        }


@pytest.mark.parametrize(
    ("patch", "param", "needle"),
    [
        ({"prompt": ["one", "two"]}, "prompt", "one prompt per request"),
        ({"prompt": [1, 2, 3]}, "prompt", "token-id prompts"),
        ({"prompt": ""}, "prompt", "non-empty"),
        ({"n": 2}, "n", "not supported"),
        ({"logprobs": 6}, "logprobs", "5"),
        ({"echo": 1}, "echo", "bool"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "required"),
        ({"presence_penalty": 0.5}, "presence_penalty", "not supported"),
        ({"logit_bias": {"5": 10}}, "logit_bias", "not supported"),
        ({"best_of": 3}, "best_of", "not supported"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "stream: true"),
        ({"temprature": 0.5}, "temprature", "unrecognized field 'temprature'"),
        ({"max_tokens": "9"}, "max_tokens", "integer"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    client: httpx.AsyncClient, backend: Any, patch: dict[str, Any], param: str, needle: str
) -> None:
    response = await client.post("/v1/completions", json={**BODY, **patch})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert needle in error["message"]
    assert backend.requests == []


@pytest.mark.parametrize(
    ("headers", "param"),
    [({"X-Switchyard-Class": "batch"}, "X-Switchyard-Class"), ({"X-Request-Id": "no spaces"}, "X-Request-Id")],
)
async def test_bad_headers_are_a_400_naming_the_header(
    client: httpx.AsyncClient, headers: dict[str, str], param: str
) -> None:
    response = await client.post("/v1/completions", json=BODY, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


async def test_unknown_model_is_a_404_and_a_busy_id_attaches_or_conflicts(
    client: httpx.AsyncClient, backend: Any, registry: Any, until: Callable[..., Awaitable[None]]
) -> None:
    response = await client.post("/v1/completions", json={**BODY, "model": "nope"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    backend.hold_after = 1
    first = asyncio.create_task(client.post("/v1/completions", json=BODY, headers={"X-Request-Id": "dup"}))
    await until(lambda: (e := registry.get("alpha/dup")) is not None and bool(e.deltas))
    other = await client.post("/v1/completions", json={**BODY, "max_tokens": 8}, headers={"X-Request-Id": "dup"})
    assert other.status_code == 409
    assert other.json()["error"]["param"] == "request_id"
    same = asyncio.create_task(client.post("/v1/completions", json=BODY, headers={"X-Request-Id": "dup"}))
    await until(lambda: registry.get("alpha/dup").readers == 2)
    backend.resume.set()
    replies = [(await first).json(), (await same).json()]
    assert [r["choices"][0]["text"] for r in replies] == ["Hello, world"] * 2
    assert replies[0]["id"] == replies[1]["id"] == "cmpl-dup"
    assert len(backend.requests) == 1
