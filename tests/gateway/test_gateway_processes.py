"""Two gateway processes behind one port, simulated as two apps (each with its own FakeBackend)
on one real Redis: a DELETE or a repeat that lands on the process that does not run the
request still reaches it, through the cancel bus and the recorded deltas."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis
from fastapi import FastAPI

PROMPT = "the quick brown fox"
BODY: dict[str, Any] = {"model": "small", "prompt": PROMPT, "max_tokens": 9}
Sse = Callable[[str], list[tuple[str | None, Any]]]
Until = Callable[[Callable[[], bool]], Awaitable[None]]


@dataclass(frozen=True)
class OtherProcess:
    http: httpx.AsyncClient  # sends team alpha's key
    backend: Any


@pytest.fixture
async def other(
    app: FastAPI, make_app: Callable[[Any], FastAPI], new_backend: Callable[[], Any], team_key: str
) -> AsyncIterator[OtherProcess]:
    """A second gateway on the same config and Redis, started after the first (`app`)."""
    backend = new_backend()
    second = make_app(backend)
    transport = httpx.ASGITransport(app=second)
    headers = {"Authorization": f"Bearer {team_key}"}
    async with (
        second.router.lifespan_context(second),
        httpx.AsyncClient(transport=transport, base_url="http://gateway-2", headers=headers) as http,
    ):
        yield OtherProcess(http, backend)


async def test_a_delete_on_another_process_cancels_where_it_runs(
    client: httpx.AsyncClient,
    backend: Any,
    registry: Any,
    other: OtherProcess,
    sse: Sse,
    until: Until,
    count_tokens: Callable[[str], int],
) -> None:
    backend.hold_after = 2
    post = asyncio.create_task(client.post("/v1/generate", json={**BODY, "stream": True, "request_id": "far"}))
    await until(lambda: (e := registry.get("alpha/far")) is not None and len(e.deltas) == 2)

    reply = await other.http.delete("/v1/generate/far")
    so_far = {"prompt_tokens": count_tokens(PROMPT), "cached_tokens": 0, "completion_tokens": 3}
    assert reply.status_code == 200
    assert reply.json() == {"request_id": "far", "status": "cancelled", "usage": so_far}
    assert backend.cancel_calls == ["alpha/far"]  # the owner's backend: the server frees the KV
    assert (other.backend.requests, other.backend.cancel_calls) == ([], [])

    events = sse((await post).text)
    assert [data["text"] for _, data in events[:2]] == ["Hello", ", "]
    assert events[2][1]["stop_reason"] == "cancelled"
    assert (await other.http.delete("/v1/generate/unknown")).status_code == 404


async def test_a_repeat_on_another_process_replays_then_follows(
    client: httpx.AsyncClient,
    backend: Any,
    registry: Any,
    other: OtherProcess,
    sse: Sse,
    until: Until,
    redis_url: str,
) -> None:
    backend.hold_after = 2
    body = {**BODY, "stream": True, "request_id": "twice"}
    first = asyncio.create_task(client.post("/v1/generate", json=body))
    await until(lambda: (e := registry.get("alpha/twice")) is not None and len(e.deltas) == 2)

    repeat = asyncio.create_task(other.http.post("/v1/generate", json=body))
    with redis.Redis.from_url(redis_url) as r:
        # The repeat has read what was recorded so far and blocks for more (XREAD BLOCK).
        await until(lambda: r.info("clients")["blocked_clients"] == 1)
    assert not repeat.done()
    backend.resume.set()

    original, replayed = sse((await first).text), sse((await repeat).text)
    assert [data["text"] for _, data in original[:3]] == ["Hello", ", ", "world"]
    assert replayed == original
    # And once it ended, the stored result, still from the one generation.
    whole = await other.http.post("/v1/generate", json={**body, "stream": False})
    assert (whole.json()["text"], whole.json()["usage"]) == ("Hello, world", original[-2][1]["usage"])
    assert (len(backend.requests), other.backend.requests) == (1, [])
