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

from gateway.sse import sse_event


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
