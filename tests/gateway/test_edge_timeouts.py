"""Slow and malformed clients under a real uvicorn: a body that stalls or trickles gets 408, and a
request head sent a byte at a time is cut off, so neither holds a connection for ever; a head too
large is a JSON 431, one that is not HTTP a JSON 400, each read whole by the client (no reset).
Each under both of the gateway's protocols (gateway/server.py's `uvicorn_stack`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from gateway.http_protocol import NoDelayH11Protocol
from gateway.httptools_protocol import NoDelayHttpToolsProtocol

HEAD_TIMEOUT_S = 1  # uvicorn's timeout_keep_alive: the request head's deadline
DEADLINE_S = 15.0  # generous: the machine is busy


# Each test on the standard library's loop and on uvloop's (what the gateway serves on).
pytestmark = pytest.mark.asyncio(loop_factories=["asyncio", "uvloop"])


@pytest.fixture
def config_path(config_path: Path) -> Path:
    limits = "gateway: {body_timeout_s: 0.5, min_body_bytes_per_s: 1000}\n"
    config_path.write_text(config_path.read_text() + limits)
    return config_path


@pytest.fixture(params=[NoDelayHttpToolsProtocol, NoDelayH11Protocol], ids=["httptools", "h11"])
async def port(make_app: Callable[[Any], FastAPI], backend: Any, request: pytest.FixtureRequest) -> AsyncIterator[int]:
    """The gateway served by uvicorn with each of the gateway's own protocols, on a free port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        make_app(backend),
        log_level="warning",
        lifespan="on",
        http=request.param,
        timeout_keep_alive=HEAD_TIMEOUT_S,
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=10)
        sock.close()


def head(key: str, length: int) -> bytes:
    return (
        f"POST /v1/generate HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


async def status_line(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.readline(), timeout=DEADLINE_S)


async def test_a_stalled_body_gets_408(port: int, team_key: str, backend: Any) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    with contextlib.closing(writer):
        writer.write(head(team_key, 1000) + b'{"model": "small", ')
        await writer.drain()
        assert (await status_line(reader)).startswith(b"HTTP/1.1 408")
        rest = await asyncio.wait_for(reader.read(), timeout=DEADLINE_S)  # then the connection closes
        assert b"request_timeout" in rest
    assert backend.requests == []


async def test_a_trickling_body_gets_408(port: int, team_key: str) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    with contextlib.closing(writer):
        writer.write(head(team_key, 100_000))

        async def trickle() -> None:  # 10 bytes every 50 ms: 200 bytes/s, never a long pause
            with contextlib.suppress(ConnectionError):
                while True:
                    writer.write(b" " * 10)
                    await writer.drain()
                    await asyncio.sleep(0.05)

        sending = asyncio.create_task(trickle())
        try:
            assert (await status_line(reader)).startswith(b"HTTP/1.1 408")
        finally:
            sending.cancel()


async def test_a_request_head_sent_a_byte_at_a_time_is_cut_off(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    with contextlib.closing(writer):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n")

        async def dribble() -> None:  # one byte of a header every 100 ms, never finishing
            with contextlib.suppress(ConnectionError):
                while True:
                    writer.write(b"X")
                    await writer.drain()
                    await asyncio.sleep(0.1)

        sending = asyncio.create_task(dribble())
        try:
            assert await asyncio.wait_for(reader.read(), timeout=DEADLINE_S) == b""  # closed by the server
        finally:
            sending.cancel()


async def test_a_kept_alive_connection_serves_requests_in_time(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    with contextlib.closing(writer):
        for _ in range(2):
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")
            await writer.drain()
            assert (await status_line(reader)).startswith(b"HTTP/1.1 200")
            while (await asyncio.wait_for(reader.readline(), timeout=DEADLINE_S)) != b"\r\n":
                pass
            await asyncio.wait_for(reader.readexactly(len(b'{"status":"ok"}')), timeout=DEADLINE_S)


async def refused(port: int, request: bytes) -> tuple[bytes, dict[str, Any]]:
    """The status line and JSON error a raw `request` gets (all of it sent first)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    with contextlib.closing(writer):
        writer.write(request)
        await asyncio.wait_for(writer.drain(), timeout=DEADLINE_S)
        answer = await asyncio.wait_for(reader.read(), timeout=DEADLINE_S)  # until the server closes
    response_head, _, body = answer.partition(b"\r\n\r\n")
    status = response_head.split(b"\r\n")[0]
    error: dict[str, Any] = json.loads(body)["error"]
    return status, error


async def test_two_hundred_headers_of_8_kb_get_a_json_431(port: int, team_key: str, backend: Any) -> None:
    headers = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 8000) for i in range(200))
    status, error = await refused(port, head(team_key, 2)[:-2] + headers + b"\r\n{}")
    assert status.startswith(b"HTTP/1.1 431")
    assert error["type"] == "invalid_request_error" and error["code"] == "request_header_fields_too_large"
    assert error["param"] is None and "16 KiB" in error["message"]
    assert backend.requests == []


async def test_a_head_that_is_not_http_gets_a_json_400(port: int) -> None:
    status, error = await refused(port, b"POST /v1/generate HTTP/1.1\r\nBad Header Name: x\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 400")
    assert error["code"] == "invalid_http_request" and "not valid HTTP/1.1" in error["message"]
