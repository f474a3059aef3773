"""SSE framing, and the gateway under a real uvicorn: a client that hangs up mid-stream cancels
its request through the server's own disconnect handling."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from contracts.generation import GenerationDelta, GenerationRequest
from gateway.sse import sse_event, stream_events
from serving.requests_registry import InflightRequest


def test_event_is_one_data_line_even_with_newlines_in_the_text() -> None:
    frame = sse_event({"request_id": "r", "text": "a\n\nb é"})
    assert frame == 'data: {"request_id":"r","text":"a\\n\\nb é"}\n\n'.encode()
    assert json.loads(frame.decode()[len("data: ") : -2])["text"] == "a\n\nb é"


def test_named_event() -> None:
    assert sse_event({"error": {}}, event="error") == b'event: error\ndata: {"error":{}}\n\n'


async def test_hanging_up_under_uvicorn_cancels_the_request(
    make_app: Callable[[Any], FastAPI], backend: Any, team_key: str
) -> None:
    backend.hold_after = 2
    app = make_app(backend)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        body = {"model": "small", "prompt": "the fox", "max_tokens": 9, "stream": True, "request_id": "h"}
        headers = {"Authorization": f"Bearer {team_key}"}
        async with (
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers) as http,
            http.stream("POST", "/v1/generate", json=body) as response,
        ):
            assert response.headers["x-request-id"] == "h"
            lines = response.aiter_lines()
            assert json.loads((await anext(lines)).removeprefix("data: "))["text"] == "Hello"
        # The connection is closed with the request still held by the backend.
        for _ in range(200):
            if backend.cancel_calls:
                break
            await asyncio.sleep(0.01)
        assert backend.cancel_calls == ["alpha/h"]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            assert (await http.get("/healthz")).status_code == 200
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=5)
        sock.close()
    assert backend.closed_backend


class _NoCancels:
    """stream_events' registry: only asked to cancel when its last reader leaves early."""

    def cancel_soon(self, request_id: str) -> None:
        raise AssertionError(f"{request_id} cancelled: it had ended")


async def test_events_ready_at_once_go_out_as_one_chunk() -> None:
    """A reply that arrived whole is one socket write: its deltas, the final event and [DONE];
    one that arrives in two parts, two."""
    request = GenerationRequest(request_id="r", model_id="m", prompt="p", max_tokens=3)
    whole = InflightRequest(request, prompt_tokens=1, started_at=0.0)
    for text, token in (("a", 1), ("b", 2)):
        whole.apply(GenerationDelta(text=text, token_ids=(token,)), now=0.0)
    whole.finish("length")
    chunks = [c async for c in stream_events(whole, _NoCancels(), heartbeat_s=5.0)]  # type: ignore[arg-type]
    assert len(chunks) == 1
    events = chunks[0].split(b"\n\n")[:-1]
    assert [json.loads(e[len(b"data: ") :])["text"] for e in events[:3]] == ["a", "b", ""]
    assert events[3] == b"data: [DONE]"

    parted = InflightRequest(request, prompt_tokens=1, started_at=0.0)
    parted.apply(GenerationDelta(text="a", token_ids=(1,)), now=0.0)
    stream = stream_events(parted, _NoCancels(), heartbeat_s=5.0)  # type: ignore[arg-type]
    first = await anext(stream)
    parted.apply(GenerationDelta(text="b", token_ids=(2,)), now=0.0)
    parted.finish("length")
    rest = [c async for c in stream]
    assert first.count(b"data: ") == 1 and len(rest) == 1 and rest[0].count(b"data: ") == 3


class _TextWriter:
    """A ChunkWriter that frames each delta's text as one event (the OpenAI routes' shape)."""

    def opening(self) -> list[bytes]:
        return [b"data: open\n\n"]

    def delta(self, delta: GenerationDelta) -> list[bytes]:
        return [b"data: " + delta.text.encode() + b"\n\n"]

    def finish(self, reason: Any) -> list[bytes]:
        return [b"data: finish " + str(reason).encode() + b"\n\n"]

    def usage(self, usage: Any) -> bytes:
        return b"data: usage\n\n"


async def test_a_burst_of_deltas_mid_stream_is_one_body_chunk_in_order() -> None:
    """Deltas that arrive together while a stream waits go out as one write on both stream
    bodies (/v1/generate's and the OpenAI routes'), each event in order."""
    from gateway.openai_serving import stream_chunks

    request = GenerationRequest(request_id="r", model_id="m", prompt="p", max_tokens=9)
    burst = [str(i) for i in range(1, 6)]
    for route in ("native", "openai"):
        entry = InflightRequest(request, prompt_tokens=1, started_at=0.0)
        entry.apply(GenerationDelta(text="0", token_ids=(0,)), now=0.0)
        if route == "native":
            stream = stream_events(entry, _NoCancels(), heartbeat_s=5.0)  # type: ignore[arg-type]
        else:
            stream = stream_chunks(entry, _NoCancels(), _TextWriter(), False, heartbeat_s=5.0)  # type: ignore[arg-type]
        first = await anext(stream)
        waiting = asyncio.ensure_future(anext(stream))  # the stream waits for the next change
        await asyncio.sleep(0)
        assert not waiting.done()
        for i, text in enumerate(burst, start=1):
            entry.apply(GenerationDelta(text=text, token_ids=(i,)), now=0.0)
        chunk = await asyncio.wait_for(waiting, timeout=5)
        events = chunk.split(b"\n\n")[:-1]
        texts = [e.removeprefix(b"data: ").decode() for e in events]
        if route == "native":
            texts = [json.loads(t)["text"] for t in texts]
            assert json.loads(first.removeprefix(b"data: "))["text"] == "0"
        assert texts == burst, route
        entry.finish("length")
        assert [c async for c in stream][-1].endswith(b"data: [DONE]\n\n")


def test_event_json_is_compact_utf8_with_tuples_as_arrays_and_no_nan() -> None:
    frame = sse_event({"text": "é 😀 \u2028", "token_ids": (1, 2), "x": float("nan")})
    assert frame == 'data: {"text":"é 😀 \u2028","token_ids":[1,2],"x":null}\n\n'.encode()
    assert json.loads(frame[len(b"data: ") : -2]) == {"text": "é 😀 \u2028", "token_ids": [1, 2], "x": None}
