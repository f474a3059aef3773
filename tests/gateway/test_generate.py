"""POST /v1/generate against a scripted backend: the whole reply, the SSE stream, usage, and
failures before and after the first byte."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from tokenizers import Tokenizer

from contracts.generation import BackendUnavailable, GenerationDelta, GenerationRequest, Usage
from contracts.token_ids import PackedTokenIds

PROMPT = "the quick brown fox"
BODY = {"model": "small", "prompt": PROMPT, "max_tokens": 3}
Sse = Callable[[str], list[tuple[str | None, Any]]]
Until = Callable[[Callable[[], bool]], Awaitable[None]]


async def test_whole_reply(client: httpx.AsyncClient, backend: Any, count_tokens: Callable[[str], int]) -> None:
    response = await client.post("/v1/generate", json={**BODY, "request_id": "req-1"})
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "req-1"
    assert response.json() == {
        "request_id": "req-1",
        "model": "small",
        "text": "Hello, world",
        "stop_reason": "length",
        # The fake sends no counters: the gateway's own count of prompt and completion tokens.
        "usage": {"prompt_tokens": count_tokens(PROMPT), "cached_tokens": 0, "completion_tokens": 4},
    }


async def test_generated_request_id_is_returned(client: httpx.AsyncClient, backend: Any) -> None:
    response = await client.post("/v1/generate", json=BODY)
    request_id = response.json()["request_id"]
    assert len(request_id) == 32
    assert response.headers["x-request-id"] == request_id
    assert backend.requests[0].request_id == f"alpha/{request_id}"  # ids are the team's own


async def test_body_reaches_the_backend_as_a_generation_request(
    client: httpx.AsyncClient, backend: Any, tokenizer_json: Path
) -> None:
    body = {
        **BODY,
        "request_id": "r",
        "stop": "\n\n",
        "class": "bulk",
        "temperature": 1,
        "top_p": 0.9,
        "top_k": 40,
        "seed": 7,
        "ignore_eos": True,
    }
    assert (await client.post("/v1/generate", json=body)).status_code == 200
    assert backend.requests == [
        GenerationRequest(
            request_id="alpha/r",
            model_id="small",
            prompt=PROMPT,
            max_tokens=3,
            stop=("\n\n",),
            request_class="bulk",
            temperature=1.0,
            top_p=0.9,
            top_k=40,
            seed=7,
            ignore_eos=True,
            cache_namespace="alpha",  # a team's prompts never hit another team's prefix cache
            # The ids the context check encoded, sent in the prompt's place (never encoded again).
            prompt_token_ids=PackedTokenIds.pack(Tokenizer.from_file(str(tokenizer_json)).encode(PROMPT).ids),
            prompt_tokens=4,  # for routing: the prompt is shorter than one block, so no prefix hashes
        )
    ]


async def test_defaults_leave_sampling_to_the_model(client: httpx.AsyncClient, backend: Any) -> None:
    await client.post("/v1/generate", json={**BODY, "stop": ["a", "b"]})
    sent = backend.requests[0]
    assert (sent.request_class, sent.stop, sent.temperature, sent.top_p, sent.top_k, sent.seed) == (
        "interactive",
        ("a", "b"),
        None,
        None,
        None,
        None,
    )


async def test_stream_frames_deltas_then_final_event_then_done(
    client: httpx.AsyncClient, sse: Sse, count_tokens: Callable[[str], int]
) -> None:
    response = await client.post("/v1/generate", json={**BODY, "stream": True, "request_id": "s1"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-request-id"] == "s1"
    assert sse(response.text) == [
        (None, {"request_id": "s1", "text": "Hello", "token_ids": [5, 6]}),
        (None, {"request_id": "s1", "text": ", ", "token_ids": [7]}),
        (None, {"request_id": "s1", "text": "world", "token_ids": [8]}),
        (
            None,
            {
                "request_id": "s1",
                "text": "",
                "stop_reason": "length",
                "usage": {"prompt_tokens": count_tokens(PROMPT), "cached_tokens": 0, "completion_tokens": 4},
            },
        ),
        (None, "[DONE]"),
    ]


async def test_server_counters_win_over_the_gateway_count(client: httpx.AsyncClient, backend: Any, sse: Sse) -> None:
    backend.deltas = [
        GenerationDelta(text="a", token_ids=(1,), usage=Usage(5, 4, 1)),
        GenerationDelta(finish_reason="stop", usage=Usage(5, 4, 2)),
    ]
    response = await client.post("/v1/generate", json={**BODY, "stream": True, "request_id": "u"})
    events = sse(response.text)
    assert [data for _, data in events[:-1]] == [
        {"request_id": "u", "text": "a", "token_ids": [1]},
        {
            "request_id": "u",
            "text": "",
            "stop_reason": "stop",
            "usage": {"prompt_tokens": 5, "cached_tokens": 4, "completion_tokens": 2},
        },
    ]


async def test_idle_stream_sends_keep_alive_comments(
    app: Any, client: httpx.AsyncClient, backend: Any, sse: Sse
) -> None:
    app.state.settings = app.state.settings.model_copy(update={"sse_heartbeat_s": 0.02})
    backend.delay_s = 0.1
    response = await client.post("/v1/generate", json={**BODY, "stream": True})
    assert ": keep-alive\n\n" in response.text
    assert sse(response.text)[-1] == (None, "[DONE]")


async def test_unavailable_backend_is_503_with_retry_after(client: httpx.AsyncClient, backend: Any) -> None:
    backend.error_after = 0
    backend.error = BackendUnavailable("pool 'small': UNAVAILABLE: connection refused", retry_after_s=7)
    for stream in (False, True):
        response = await client.post("/v1/generate", json={**BODY, "stream": stream})
        assert response.status_code == 503
        assert response.headers["retry-after"] == "7"
        assert (response.json()["error"]["type"], response.json()["error"]["code"]) == (
            "server_error",
            "backend_unavailable",
        )
        assert "connection refused" in response.json()["error"]["message"]


async def test_backend_failure_before_any_text_is_502(client: httpx.AsyncClient, backend: Any) -> None:
    backend.error_after = 0
    response = await client.post("/v1/generate", json=BODY)
    assert response.status_code == 502
    assert response.json() == {
        "error": {"type": "server_error", "message": "engine failed", "param": None, "code": "backend_error"}
    }


async def test_failure_mid_stream_ends_with_an_error_event(client: httpx.AsyncClient, backend: Any, sse: Sse) -> None:
    backend.error_after = 2
    response = await client.post("/v1/generate", json={**BODY, "stream": True, "request_id": "e"})
    assert response.status_code == 200
    events = sse(response.text)
    assert [name for name, _ in events] == [None, None, "error"]
    assert events[-1][1] == {
        "request_id": "e",
        "error": {"type": "server_error", "message": "engine failed", "param": None, "code": "backend_error"},
    }


async def test_failure_mid_whole_reply_is_502(client: httpx.AsyncClient, backend: Any) -> None:
    backend.error_after = 2
    response = await client.post("/v1/generate", json=BODY)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "backend_error"


async def test_backend_ending_without_finish_reason_is_an_error(client: httpx.AsyncClient, backend: Any) -> None:
    backend.deltas = [GenerationDelta(text="a", token_ids=(1,))]
    response = await client.post("/v1/generate", json=BODY)
    assert response.status_code == 502
    assert "without a finish reason" in response.json()["error"]["message"]


async def test_a_request_id_with_another_body_is_409_while_running_and_after(
    client: httpx.AsyncClient, backend: Any, registry: Any, until: Until
) -> None:
    backend.hold_after = 1
    first = asyncio.create_task(client.post("/v1/generate", json={**BODY, "request_id": "dup"}))
    await until(lambda: registry.get("alpha/dup") is not None)
    response = await client.post("/v1/generate", json={**BODY, "max_tokens": 4, "request_id": "dup"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "request_id_conflict"
    assert response.json()["error"]["param"] == "request_id"
    assert "different body" in response.json()["error"]["message"]

    await client.delete("/v1/generate/dup")
    assert (await first).json()["stop_reason"] == "cancelled"
    # Once it ended the id still names that request: never a second generation under it.
    again = await client.post("/v1/generate", json={**BODY, "prompt": "another prompt", "request_id": "dup"})
    assert again.status_code == 409
    assert len(backend.requests) == 1
