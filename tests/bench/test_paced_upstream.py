"""The paced upstream: valid OpenAI SSE chunks at its pace, ending in [DONE]; whole replies;
keep-alive; what it tells the bench about replies in flight."""

from __future__ import annotations

import asyncio
import json
import time

from bench.paced_upstream import TOKEN_TEXT, UpstreamPace, serve


async def _exchange(port: int, request: bytes) -> tuple[bytes, float]:
    """Send `request` on a new connection and read until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    began = time.monotonic()
    writer.write(request)
    data = await asyncio.wait_for(reader.read(-1), 10)
    took = time.monotonic() - began
    writer.close()
    return data, took


def _post(path: str, body: dict[str, object], version: str = "HTTP/1.1") -> bytes:
    payload = json.dumps(body).encode()
    head = f"POST {path} {version}\r\nHost: x\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    return head.encode() + payload


def _dechunk(body: bytes) -> bytes:
    out, rest = b"", body
    while True:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            return out
        out, rest = out + rest[:size], rest[size + 2 :]


async def test_a_chat_stream_is_openai_chunks_at_the_pace_ending_in_done() -> None:
    server = await serve("127.0.0.1", 0, UpstreamPace(first_s=0.0, gap_s=0.02))
    port = server.sockets[0].getsockname()[1]
    async with server:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}
        data, took = await _exchange(port, _post("/v1/chat/completions", body))
    head, _, chunked = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"text/event-stream" in head and b"transfer-encoding: chunked" in head
    events = [e for e in _dechunk(chunked).decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert len(chunks) == 5
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": TOKEN_TEXT}
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == [TOKEN_TEXT] * 5
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4 + ["length"]
    assert 0.08 <= took < 2.0  # four gaps of 20 ms after a first token at once


async def test_a_completions_stream_over_http_1_0_is_unchunked_with_usage_when_asked() -> None:
    server = await serve("127.0.0.1", 0, UpstreamPace(first_s=0.0, gap_s=0.001))
    port = server.sockets[0].getsockname()[1]
    async with server:
        body = {
            "model": "m",
            "prompt": "hi",
            "max_tokens": 1,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        data, _ = await _exchange(port, _post("/v1/completions", body, "HTTP/1.0"))
    head, _, stream = data.partition(b"\r\n\r\n")
    assert b"chunked" not in head
    events = [e for e in stream.decode().split("\n\n") if e]
    first, usage = json.loads(events[0][6:]), json.loads(events[1][6:])
    assert first["object"] == "text_completion"
    assert first["choices"][0]["text"] == TOKEN_TEXT and first["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 1
    assert events[2] == "data: [DONE]"


async def test_whole_replies_on_one_kept_alive_connection_and_replies_in_flight() -> None:
    server = await serve("127.0.0.1", 0, UpstreamPace(first_s=0.0, gap_s=0.001))
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        payload = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 3}).encode()
        for _ in range(2):
            writer.write(b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
            reply = json.loads(await reader.readexactly(length))
            assert reply["choices"][0]["text"] == TOKEN_TEXT * 3 and reply["usage"]["completion_tokens"] == 3
        stream = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 1000, "stream": True}).encode()
        writer.write(b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(stream), stream))
        await asyncio.wait_for(reader.readuntil(b"data: "), 10)
        data, _ = await _exchange(port, b"GET /bench/in-flight HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert json.loads(data.partition(b"\r\n\r\n")[2]) == {"in_flight": 1, "replies": 3}
        writer.close()  # a client that leaves: its reply ends with it
        deadline = time.monotonic() + 10
        while True:
            data, _ = await _exchange(port, b"GET /bench/in-flight HTTP/1.0\r\n\r\n")
            if json.loads(data.partition(b"\r\n\r\n")[2])["in_flight"] == 0:
                break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)


async def test_a_bad_body_is_a_400_and_an_unknown_route_a_404() -> None:
    server = await serve("127.0.0.1", 0, UpstreamPace())
    port = server.sockets[0].getsockname()[1]
    async with server:
        bad, _ = await _exchange(port, _post("/v1/chat/completions", {"model": "m", "max_tokens": 3}))
        missing, _ = await _exchange(port, b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert bad.startswith(b"HTTP/1.1 400") and b"messages" in bad
    assert missing.startswith(b"HTTP/1.1 404")
