"""Cancellation: DELETE /v1/generate/{id} and a client that goes away both end the request and
reach the backend, which is what frees the server's KV."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, MutableMapping
from typing import Any

import httpx
import pytest
import redis
from fastapi import FastAPI

from contracts.generation import BackendError

PROMPT = "the quick brown fox"
BODY = {"model": "small", "prompt": PROMPT, "max_tokens": 10}
Sse = Callable[[str], list[tuple[str | None, Any]]]


async def until(predicate: Callable[[], bool], timeout_s: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def has_deltas(registry: Any, request_id: str, n: int) -> Callable[[], bool]:
    def check() -> bool:
        entry = registry.get(request_id)
        return entry is not None and len(entry.deltas) >= n

    return check


async def test_delete_cancels_an_in_flight_stream(
    client: httpx.AsyncClient,
    backend: Any,
    registry: Any,
    sse: Sse,
    count_tokens: Callable[[str], int],
) -> None:
    backend.hold_after = 2
    post = asyncio.create_task(client.post("/v1/generate", json={**BODY, "stream": True, "request_id": "c1"}))
    await until(has_deltas(registry, "alpha/c1", 2))

    response = await client.delete("/v1/generate/c1")
    so_far = {"prompt_tokens": count_tokens(PROMPT), "cached_tokens": 0, "completion_tokens": 3}
    assert response.status_code == 200
    assert response.json() == {"request_id": "c1", "status": "cancelled", "usage": so_far}
    assert backend.cancel_calls == ["alpha/c1"]
    assert registry.get("alpha/c1") is None

    events = sse((await post).text)
    assert [data["text"] for _, data in events[:2]] == ["Hello", ", "]
    assert events[2] == (None, {"request_id": "c1", "text": "", "stop_reason": "cancelled", "usage": so_far})
    assert events[3] == (None, "[DONE]")


async def test_delete_cancels_the_task_when_the_backend_cannot(
    client: httpx.AsyncClient, backend: Any, registry: Any
) -> None:
    backend.hold_after = 1
    backend.honour_cancel = False
    post = asyncio.create_task(client.post("/v1/generate", json={**BODY, "request_id": "c2"}))
    await until(has_deltas(registry, "alpha/c2", 1))

    response = await client.delete("/v1/generate/c2")
    assert response.json()["status"] == "cancelled"
    assert backend.closed == ["alpha/c2"]  # the backend's stream was closed early: Triton sees is_cancelled()

    whole = (await post).json()
    assert (whole["text"], whole["stop_reason"]) == ("Hello", "cancelled")
    assert whole["usage"]["completion_tokens"] == 2


async def test_a_stream_that_breaks_while_its_cancel_is_on_the_way_ends_cancelled(
    client: httpx.AsyncClient, backend: Any, registry: Any, redis_url: str
) -> None:
    """The partition run: a DELETE raced a flapping link, the stream ended with the link's
    error, and the id's stored result was that failure, so the client's retry with its id got
    a 502. The client asked it to stop, and it stopped: cancelled, and a repeat says so."""
    backend.hold_after = 1
    backend.fail_on_cancel = True
    backend.error = BackendError("server 'x': UNAVAILABLE: Stream removed")
    post = asyncio.create_task(client.post("/v1/generate", json={**BODY, "request_id": "c9"}))
    await until(has_deltas(registry, "alpha/c9", 1))

    assert (await client.delete("/v1/generate/c9")).json()["status"] == "cancelled"
    whole = (await post).json()
    assert (whole["text"], whole["stop_reason"]) == ("Hello", "cancelled")
    with redis.Redis.from_url(redis_url) as r:
        await until(lambda: r.hget("sy:req:alpha:c9", "state") == b"done")
    again = await client.post("/v1/generate", json={**BODY, "request_id": "c9"})
    assert again.status_code == 200 and again.json()["stop_reason"] == "cancelled"


async def test_delete_before_the_first_token(client: httpx.AsyncClient, backend: Any, registry: Any) -> None:
    backend.hold_after = 0
    post = asyncio.create_task(client.post("/v1/generate", json={**BODY, "stream": True, "request_id": "c3"}))
    await until(lambda: bool(backend.requests))
    response = await client.delete("/v1/generate/c3")
    assert response.json()["usage"]["completion_tokens"] == 0
    body = (await post).text
    assert '"stop_reason":"cancelled"' in body


async def test_delete_unknown_is_404(client: httpx.AsyncClient) -> None:
    response = await client.delete("/v1/generate/nope")
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "type": "not_found_error",
            "message": "no request 'nope' is in flight",
            "param": "request_id",
            "code": "request_not_found",
        }
    }


async def test_a_finished_request_reports_how_it_ended(
    client: httpx.AsyncClient, backend: Any, count_tokens: Callable[[str], int]
) -> None:
    await client.post("/v1/generate", json={**BODY, "request_id": "done"})
    response = await client.delete("/v1/generate/done")
    assert response.status_code == 200
    whole = {"prompt_tokens": count_tokens(PROMPT), "cached_tokens": 0, "completion_tokens": 4}
    assert response.json() == {"request_id": "done", "status": "completed", "usage": whole}
    assert backend.cancel_calls == []

    backend.error_after = 1
    await client.post("/v1/generate", json={**BODY, "request_id": "broke"})
    assert (await client.delete("/v1/generate/broke")).json()["status"] == "failed"


async def test_another_teams_request_is_not_found(
    client: httpx.AsyncClient, backend: Any, registry: Any, make_key: Callable[[str], str]
) -> None:
    backend.hold_after = 1
    post = asyncio.create_task(client.post("/v1/generate", json={**BODY, "request_id": "mine"}))
    await until(has_deltas(registry, "alpha/mine", 1))
    beta = {"Authorization": f"Bearer {make_key('beta')}"}
    assert (await client.delete("/v1/generate/mine", headers=beta)).status_code == 404
    assert backend.cancel_calls == []
    assert (await client.delete("/v1/generate/mine")).json()["status"] == "cancelled"
    assert (await post).json()["stop_reason"] == "cancelled"


class AsgiClient:
    """Drives the app over raw ASGI so a test can disconnect mid-response, which httpx's
    in-process transport cannot do (it reads the whole body before returning)."""

    def __init__(self, app: FastAPI, key: str, body: dict[str, Any], disconnect_after_chunks: int) -> None:
        self.app = app
        self.key = key
        self.body = json.dumps(body).encode()
        self.disconnect_after_chunks = disconnect_after_chunks
        self.messages: list[MutableMapping[str, Any]] = []
        self._body_sent = False
        self._gone = asyncio.Event()
        if disconnect_after_chunks == 0:
            self._gone.set()

    async def receive(self) -> dict[str, Any]:
        if not self._body_sent:
            self._body_sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.messages.append(message)
        chunks = [m for m in self.messages if m["type"] == "http.response.body" and m.get("body")]
        if len(chunks) >= self.disconnect_after_chunks:
            self._gone.set()

    async def post(self) -> None:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},  # what uvicorn reports
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/generate",
            "raw_path": b"/v1/generate",
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"content-type", b"application/json"),
                (b"host", b"gateway"),
                (b"authorization", f"Bearer {self.key}".encode()),
            ],
            "client": ("127.0.0.1", 1234),
            "server": ("gateway", 80),
        }
        await asyncio.wait_for(self.app(scope, self.receive, self.send), timeout=5)

    def status(self) -> int:
        start = next(m for m in self.messages if m["type"] == "http.response.start")
        return int(start["status"])


@pytest.mark.parametrize("honour_cancel", [True, False])
async def test_disconnect_mid_stream_cancels_the_request(
    app: FastAPI, team_key: str, backend: Any, registry: Any, honour_cancel: bool
) -> None:
    backend.hold_after = 2
    backend.honour_cancel = honour_cancel
    asgi = AsgiClient(app, team_key, {**BODY, "stream": True, "request_id": "gone"}, disconnect_after_chunks=1)
    await asgi.post()
    await until(lambda: registry.get("alpha/gone") is None)
    assert backend.cancel_calls == ["alpha/gone"]
    assert backend.closed == ([] if honour_cancel else ["alpha/gone"])
    counter = app.state.metrics.requests.labels("small", "interactive", "cancelled")
    assert counter._value.get() == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_disconnect_while_waiting_cancels_the_request(
    app: FastAPI, team_key: str, backend: Any, registry: Any, stream: bool
) -> None:
    backend.hold_after = 0
    asgi = AsgiClient(app, team_key, {**BODY, "stream": stream, "request_id": "left"}, disconnect_after_chunks=0)
    await asgi.post()
    assert asgi.status() == 499
    assert backend.cancel_calls == ["alpha/left"]
    assert registry.get("alpha/left") is None


async def test_a_disconnect_cancels_only_when_the_last_reader_leaves(
    app: FastAPI, team_key: str, client: httpx.AsyncClient, backend: Any, registry: Any, sse: Sse
) -> None:
    backend.hold_after = 2
    body = {**BODY, "stream": True, "request_id": "shared"}
    staying = asyncio.create_task(client.post("/v1/generate", json=body))
    await until(lambda: (e := registry.get("alpha/shared")) is not None and len(e.deltas) == 2 and e.readers == 1)

    leaving = AsgiClient(app, team_key, body, disconnect_after_chunks=1)  # a repeat: attaches, then hangs up
    await leaving.post()
    assert leaving.status() == 200
    await asyncio.sleep(0.05)  # a cancel would be on its way by now
    entry = registry.get("alpha/shared")
    assert entry is not None and not entry.done and entry.readers == 1
    assert backend.cancel_calls == []

    backend.resume.set()
    events = sse((await staying).text)
    assert "".join(data["text"] for _, data in events[:-2]) == "Hello, world"
    assert events[-2][1]["stop_reason"] == "length"
    assert len(backend.requests) == 1


async def test_shutdown_cancels_what_is_running(
    make_app: Callable[[Any], FastAPI], backend: Any, team_key: str
) -> None:
    backend.hold_after = 1
    app = make_app(backend)
    async with app.router.lifespan_context(app):
        registry = app.state.services.registry
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {team_key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers) as http:
            post = asyncio.create_task(http.post("/v1/generate", json={**BODY, "request_id": "s"}))
            await until(has_deltas(registry, "alpha/s", 1))
    assert backend.closed == ["alpha/s"]
    assert (await post).json()["stop_reason"] == "cancelled"
