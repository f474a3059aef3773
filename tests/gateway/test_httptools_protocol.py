"""What the httptools protocol adds beyond h11's behaviours (tests/gateway/test_edge_timeouts.py
holds those for both): a head past 16 KiB is refused whether it trickles in or arrives whole in
one read, a head just under it is served, and pipelined requests are not cut off by the deadline
of a head that already arrived."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from gateway.httptools_protocol import MAX_HEAD_BYTES, NoDelayHttpToolsProtocol

pytestmark = pytest.mark.asyncio(loop_factories=["asyncio", "uvloop"])

HEAD_TIMEOUT_S = 1
DEADLINE_S = 15.0  # generous: the machine is busy


class Transport:
    """Enough of an asyncio transport to drive the protocol by hand: what it writes is kept."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.eof = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def is_closing(self) -> bool:
        return self.closed or self.eof

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def ok_app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":  # answers after the head deadline would have passed
        loop = asyncio.get_running_loop()
        until = loop.time() + 1.5 * HEAD_TIMEOUT_S
        while loop.time() < until:
            await asyncio.sleep(0.05)
    body = scope["path"].encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


def driven_protocol() -> tuple[NoDelayHttpToolsProtocol, Transport]:
    config = uvicorn.Config(ok_app, http=NoDelayHttpToolsProtocol, timeout_keep_alive=HEAD_TIMEOUT_S)
    config.load()
    protocol = NoDelayHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


def head_of(header_bytes: int) -> bytes:
    """A GET whose header values add up to about `header_bytes`."""
    lines = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 1000) for i in range(header_bytes // 1000))
    return b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n" + lines + b"\r\n"


async def test_a_head_past_16_kib_arriving_whole_in_one_read_gets_a_json_431() -> None:
    protocol, transport = driven_protocol()
    protocol.data_received(head_of(MAX_HEAD_BYTES + 2000))
    answer = bytes(transport.written)
    assert answer.startswith(b"HTTP/1.1 431 ")
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "request_header_fields_too_large"
    assert transport.eof and not transport.closed  # closing lingering: the write side first
    protocol.data_received(b"more of the same")  # dropped, not parsed
    assert bytes(transport.written) == answer
    protocol.connection_lost(None)


async def test_a_head_past_16_kib_in_many_reads_gets_a_431_before_it_ends() -> None:
    protocol, transport = driven_protocol()
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Long: ")
    for _ in range(MAX_HEAD_BYTES // 1000 + 1):  # one header that never ends: llhttp buffers it
        assert not transport.written
        protocol.data_received(b"a" * 1000)
    assert bytes(transport.written).startswith(b"HTTP/1.1 431 ")
    protocol.connection_lost(None)


async def test_a_bad_head_gets_a_json_400_naming_the_reason() -> None:
    protocol, transport = driven_protocol()
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nBad Header: x\r\n\r\n")
    answer = bytes(transport.written)
    assert answer.startswith(b"HTTP/1.1 400 ")
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "invalid_http_request" and "Invalid header token" in error["message"]
    protocol.connection_lost(None)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        ok_app, log_level="warning", lifespan="off", http=NoDelayHttpToolsProtocol, timeout_keep_alive=HEAD_TIMEOUT_S
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


async def test_a_head_just_under_16_kib_is_served(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    with contextlib.closing(writer):
        writer.write(head_of(MAX_HEAD_BYTES - 1000))
        status = await asyncio.wait_for(reader.readline(), timeout=DEADLINE_S)
    assert status.startswith(b"HTTP/1.1 200")


async def test_pipelined_requests_outlive_the_head_deadline(port: int) -> None:
    """The second head arrived with the first: its slow answer is not cut off as a slow head."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    with contextlib.closing(writer):
        writer.write(b"GET /fast HTTP/1.1\r\nHost: g\r\n\r\nGET /slow HTTP/1.1\r\nHost: g\r\n\r\n")
        await writer.drain()
        answers = b""
        while answers.count(b"HTTP/1.1 200") < 2 or not answers.endswith(b"/slow"):
            chunk = await asyncio.wait_for(reader.read(4096), timeout=DEADLINE_S)
            assert chunk, f"closed after {answers!r}"
            answers += chunk
    assert answers.endswith(b"/slow") and b"/fast" in answers
