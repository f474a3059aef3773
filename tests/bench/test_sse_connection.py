"""The benches' one SSE client (bench/sse_connection.py), against a stand-in server that writes
canned replies a few bytes at a time: what each kind of reply ends as, for a whole reply
(`stream_reply`) and for a held stream (`open_stream`, as the concurrency bench's load counts it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from bench.sse_connection import CLOSED, StreamFailed, generate_request, open_stream, stream_reply
from bench.sse_streams import LoadTally

SSE_HEAD = b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"


def event(token_ids: list[int], text: str = "x") -> bytes:
    return b"data: " + json.dumps({"text": text, "token_ids": token_ids}).encode() + b"\n\n"


def error_event(code: str) -> bytes:
    return b"event: error\ndata: " + json.dumps({"error": {"code": code, "message": "m"}}).encode() + b"\n\n"


def refusal(status: int, code: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": "no"}}).encode()
    return f"HTTP/1.0 {status} Refused\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body


@asynccontextmanager
async def server(reply: bytes, hold: bool = False) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A server that reads a request, writes `reply` 7 bytes at a time (so lines and the head
    straddle reads), then closes, or with `hold` waits for the client to leave. Yields its port
    and the requests it read."""
    requests: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        requests.append(head + await reader.readexactly(length))
        try:
            for start in range(0, len(reply), 7):
                writer.write(reply[start : start + 7])
                await writer.drain()
                await asyncio.sleep(0)
            if hold:
                await reader.read()  # until the client closes
        except ConnectionError:
            pass  # the client left first (a head too long)
        writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield listening.sockets[0].getsockname()[1], requests
    finally:
        listening.close()


async def test_a_whole_reply_counts_each_events_tokens_and_sends_http_1_0() -> None:
    reply = SSE_HEAD + event([1, 2]) + b": keepalive\n\n" + event([]) + event([3]) + b"data: [DONE]\n\n"
    async with server(reply) as (port, requests):
        counted: list[int] = []
        await stream_reply("127.0.0.1", port, generate_request("127.0.0.1", port, "k", {"model": "m"}), counted.append)
    assert counted == [2, 1]
    head, body = requests[0].split(b"\r\n\r\n", 1)
    assert head.startswith(b"POST /v1/generate HTTP/1.0\r\n") and b"Authorization: Bearer k" in head
    assert json.loads(body) == {"model": "m", "stream": True}


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (refusal(429, "rate_limited"), "http 429 rate_limited"),
        (SSE_HEAD + event([1]) + error_event("server_error"), "sse error server_error"),
        (SSE_HEAD + event([1]), "ended early"),
        (b"HTTP/1.0 200 OK\r\n" + b"x-pad: " + b"a" * 70_000, "head too long"),
    ],
)
async def test_a_whole_reply_that_does_not_end_with_done_fails_saying_how(reply: bytes, kind: str) -> None:
    async with server(reply) as (port, _):
        with pytest.raises(StreamFailed) as failed:
            await stream_reply("127.0.0.1", port, generate_request("127.0.0.1", port, "k", {}), lambda n: None)
    assert failed.value.kind == kind


async def test_a_held_stream_opens_at_its_first_event_and_ends_closed_when_dropped() -> None:
    async with server(SSE_HEAD + event([1]) + event([2]), hold=True) as (port, _):
        tally = LoadTally()
        connection = await open_stream(
            "127.0.0.1", port, generate_request("127.0.0.1", port, "k", {}), tally.count_events
        )
        connection.ended.add_done_callback(tally.count_end)
        assert connection.events >= 1 and not connection.ended.done()
        connection.close()
        assert await connection.ended == CLOSED
        await asyncio.sleep(0)  # the done callback
    assert tally.errors == {}


async def test_a_held_stream_that_reaches_done_ended_early() -> None:
    async with server(SSE_HEAD + event([1]) + b"data: [DONE]\n\n") as (port, _):
        tally = LoadTally()
        connection = await open_stream(
            "127.0.0.1", port, generate_request("127.0.0.1", port, "k", {}), tally.count_events
        )
        connection.ended.add_done_callback(tally.count_end)
        await connection.ended
        await asyncio.sleep(0)
    assert tally.events == 1 and tally.errors == {"ended early": 1}


@pytest.mark.parametrize(
    ("reply", "kind"),
    [(refusal(503, "overloaded"), "http 503 overloaded"), (SSE_HEAD + b"data: [DONE]\n\n", "ended early")],
)
async def test_a_stream_that_ends_before_any_event_never_opens(reply: bytes, kind: str) -> None:
    async with server(reply) as (port, _):
        with pytest.raises(StreamFailed) as failed:
            await open_stream("127.0.0.1", port, generate_request("127.0.0.1", port, "k", {}), lambda lines, n: None)
    assert failed.value.kind == kind
