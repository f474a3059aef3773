"""A repeated request_id never generates twice: a repeat while the first runs attaches to it
(a stream replays what was sent so far, then follows), a repeat after it ended gets the stored
result, and another body under the same id is 409. FakeBackend and a real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import redis
from fastapi import FastAPI

from contracts.generation import BackendError
from serving.idempotency import Claim, ClaimState

PROMPT = "the quick brown fox"
BODY: dict[str, Any] = {"model": "small", "prompt": PROMPT, "max_tokens": 9}
Sse = Callable[[str], list[tuple[str | None, Any]]]
Until = Callable[[Callable[[], bool]], Awaitable[None]]


def texts(events: list[tuple[str | None, Any]]) -> list[str]:
    return [data["text"] for name, data in events if name is None and data != "[DONE]" and "token_ids" in data]


async def test_a_repeat_while_running_attaches_to_the_same_generation(
    client: httpx.AsyncClient, backend: Any, registry: Any, sse: Sse, until: Until
) -> None:
    backend.hold_after = 2
    body = {**BODY, "request_id": "att"}
    first = asyncio.create_task(client.post("/v1/generate", json={**body, "stream": True}))
    await until(lambda: (e := registry.get("alpha/att")) is not None and len(e.deltas) == 2)
    # Two repeats join half-way through: one streamed, one waiting for the whole reply.
    streamed = asyncio.create_task(client.post("/v1/generate", json={**body, "stream": True}))
    whole = asyncio.create_task(client.post("/v1/generate", json=body))
    await until(lambda: registry.get("alpha/att").readers == 3)
    backend.resume.set()

    original, repeat = sse((await first).text), sse((await streamed).text)
    assert texts(original) == ["Hello", ", ", "world"]
    assert repeat == original  # what was sent before it came, then the rest, then the same end
    reply = (await whole).json()
    assert (reply["request_id"], reply["text"], reply["stop_reason"]) == ("att", "Hello, world", "length")
    assert reply["usage"] == original[-2][1]["usage"]
    assert len(backend.requests) == 1


async def test_a_repeat_after_the_end_gets_the_stored_result(
    client: httpx.AsyncClient, backend: Any, sse: Sse, redis_url: str, until: Until
) -> None:
    body = {**BODY, "request_id": "done"}
    first = await client.post("/v1/generate", json=body)
    streamed_first = await client.post("/v1/generate", json={**BODY, "request_id": "done-s", "stream": True})
    assert len(backend.requests) == 2
    with redis.Redis.from_url(redis_url) as r:  # the results are stored as the requests end
        await until(lambda: all(r.hget(f"sy:req:alpha:{i}", "state") == b"done" for i in ("done", "done-s")))
    backend.deltas = []  # a second generation would now fail: there must be none

    again = await client.post("/v1/generate", json=body)
    assert again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["x-request-id"] == "done"
    replayed = await client.post("/v1/generate", json={**BODY, "request_id": "done-s", "stream": True})
    assert sse(replayed.text) == sse(streamed_first.text)
    # Streamed or not is how to read it, not what was asked: the stored result either way.
    assert (await client.post("/v1/generate", json={**body, "stream": True})).status_code == 200
    assert len(backend.requests) == 2


async def test_the_same_id_with_another_body_is_409(client: httpx.AsyncClient, backend: Any) -> None:
    assert (await client.post("/v1/generate", json={**BODY, "request_id": "r"})).status_code == 200
    for change in ({"prompt": "another prompt"}, {"max_tokens": 8}, {"temperature": 0.5}, {"model": "large"}):
        reply = await client.post("/v1/generate", json={**BODY, **change, "request_id": "r"})
        assert reply.status_code == 409, change
        assert reply.json()["error"]["code"] == "request_id_conflict"
        assert reply.json()["error"]["param"] == "request_id"
        assert reply.headers["X-Request-Id"] == "r"
    # Another route's body is another body too.
    completion = await client.post("/v1/completions", json=BODY, headers={"X-Request-Id": "r"})
    assert completion.status_code == 409
    assert len(backend.requests) == 1


async def test_a_failure_before_any_token_frees_the_id_and_a_later_one_is_resumed(
    client: httpx.AsyncClient, backend: Any, sse: Sse
) -> None:
    backend.error_after = 0
    backend.error = BackendError("engine failed")
    first = await client.post("/v1/generate", json={**BODY, "request_id": "bad"})
    assert first.status_code == 502
    backend.error_after = 1
    streamed = await client.post("/v1/generate", json={**BODY, "request_id": "bad-late", "stream": True})
    assert [name for name, _ in sse(streamed.text)] == [None, "error"]
    assert len(backend.requests) == 2

    # Nothing was written for "bad": the retry its 502 invites runs again.
    backend.error_after = None
    again = await client.post("/v1/generate", json={**BODY, "request_id": "bad"})
    assert again.status_code == 200
    assert len(backend.requests) == 3
    # "bad-late" had written text: its repeat resumes it from there (the same first event, then
    # the rest), one generation carried on rather than a second from the start.
    late = await client.post("/v1/generate", json={**BODY, "request_id": "bad-late", "stream": True})
    events = sse(late.text)
    assert events[0] == sse(streamed.text)[0]
    assert "".join(data.get("text", "") for name, data in events if name is None and data != "[DONE]") == "Hello, world"
    assert len(backend.requests) == 4 and backend.requests[-1].resume_token_ids == (5, 6)


async def test_a_model_no_pool_serves_is_503_and_claims_no_id(
    make_app: Callable[[Any], FastAPI], backend: Any, team_key: str, config_path: Path, redis_url: str
) -> None:
    spare = "models:\n  spare: {weights_uri: models/small, max_context_tokens: 64}\n"
    config_path.write_text(config_path.read_text().replace("models:\n", spare, 1))
    app = make_app(backend)
    headers = {"Authorization": f"Bearer {team_key}"}
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers) as http,
    ):
        for _ in range(2):  # the retry is refused the same way, not attached to nothing
            reply = await http.post("/v1/generate", json={**BODY, "model": "spare", "request_id": "orphan"})
            assert reply.status_code == 503
            assert "no pool serves model 'spare'" in reply.json()["error"]["message"]
            with redis.Redis.from_url(redis_url) as r:
                assert r.exists("sy:req:alpha:orphan") == 0
    assert backend.requests == []


async def test_a_repeat_that_loses_redis_while_following_is_a_503_not_an_empty_reply(
    client: httpx.AsyncClient, app: FastAPI, backend: Any, monkeypatch: Any
) -> None:
    """The partition run found batch entries recorded done with no text: a repeat attached to
    a generation, Redis failed over under its follow, and the reply ended `aborted` with a
    200. Not over is not done: a 503 the caller retries with the same id."""
    idempotency = app.state.services.generation._idempotency

    async def running(*_: Any) -> Claim:  # another process generates it
        return Claim(ClaimState.RUNNING)

    async def lost_redis(*_: Any, **__: Any) -> AsyncIterator[Any]:
        raise redis.ConnectionError("Connection closed by server.")
        yield  # an async generator, as follow is

    monkeypatch.setattr(idempotency, "claim", running)
    monkeypatch.setattr(idempotency, "follow", lost_redis)
    whole = await client.post("/v1/generate", json={**BODY, "request_id": "followed"})
    assert whole.status_code == 503, whole.text
    assert whole.headers["Retry-After"] == "1"
    streamed = await client.post("/v1/generate", json={**BODY, "request_id": "followed", "stream": True})
    assert streamed.status_code == 503 and "retry with the same request_id" in streamed.text
    assert backend.requests == []
