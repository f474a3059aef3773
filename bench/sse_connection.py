"""One streamed reply of `POST /v1/generate` on a raw asyncio connection: the benches' one SSE
client, for the many held streams of the concurrency bench (`sse_streams.py`) and the replies
streamed back to back of the serving-overhead bench (`overhead_client.py`).

Why not httpx: at ten thousand streams the clients' CPU competes with the gateway's for the
same cores, and their memory is the machine's. Measured on the 2-core machine, one client
process holding 200 streams of the paced gateway (an event every 1-2 s each) for 20 s, twice
each: httpx.AsyncClient (`stream()` + `aiter_lines()`, a task per stream) took 390-400 µs of
CPU per event and 58-59 KB per open stream; this protocol 125-146 µs and 3.4 KB (at 1,000
streams 88-92 µs, half of it the kernel's receive path).

The request is HTTP/1.0, so the reply comes unchunked and ends when the gateway closes the
connection: the body is the event stream itself, every `data:` line whole once its newline is
in. The parsing is the minimum the benches need: the status (and a refusal's error code), then
which lines are events, the end, or an error; what an event holds is the caller's to read.

    connect ─▶ SseConnection ─▶ on_events(lines, n) per read ... `opened` at the first event
                               `ended`: "done" at [DONE], "closed" by close(), else the failure
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

HEAD_LIMIT = 64 * 1024
DONE = "done"  # the kind of a reply that ended with `data: [DONE]`
CLOSED = "closed"  # the kind of a stream this side closed

# Called once per read that holds whole lines: those lines, and how many events they hold.
EventsHandler = Callable[[bytes, int], None]


class StreamFailed(Exception):
    """A stream that did not end with `[DONE]`: `kind` says how (`http 429 rate_limited`,
    `sse error <code>`, `ended early`, `head too long`, an exception's class)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def generate_request(host: str, port: int, api_key: str, body: dict[str, object]) -> bytes:
    """The bytes of a streamed `POST /v1/generate` carrying `body`."""
    payload = json.dumps({**body, "stream": True}).encode()
    head = (
        f"POST /v1/generate HTTP/1.0\r\nHost: {host}:{port}\r\nAuthorization: Bearer {api_key}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


class SseConnection(asyncio.Protocol):
    """One stream's connection: sends the request, reads the status, then hands whole lines to
    `on_events` as they arrive (a marker never straddles a read). No task per stream and no
    await per event: one callback per read.

    `opened` resolves at the first event, or when the stream ends before one; `ended` resolves
    with the end's kind (module docstring). Neither ever holds an exception, so a stream nobody
    awaits leaves no "exception never retrieved" behind."""

    def __init__(self, request: bytes, on_events: EventsHandler) -> None:
        self.request = request
        self.on_events = on_events
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[str] = loop.create_future()
        self.events = 0
        self.transport: asyncio.Transport | None = None
        self._head = b""
        self._status: int | None = None
        self._partial = b""  # the last, unfinished line
        self._refusal = b""  # the body of a response other than 200
        self._refusal_length = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if self._status is None:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > HEAD_LIMIT:
                    self._end("head too long")
                return
            head, data, self._head = self._head[:end], self._head[end + 4 :], b""
            self._status = int(head.split(b" ", 2)[1])
            self._refusal_length = _content_length(head)
        if self._status != 200:
            self._refusal += data
            if len(self._refusal) >= self._refusal_length:
                self._end(self._refused_kind())
            return
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            self._partial += data
            return
        lines, self._partial = self._partial + data[:cut], data[cut:]
        error_at = lines.find(b"event: error")
        if error_at >= 0 and lines.find(b"data: ", error_at) < 0:  # its data line is still to come
            lines, self._partial, error_at = lines[:error_at], lines[error_at:] + self._partial, -1
        done, error = b"data: [DONE]" in lines, error_at >= 0
        events = lines.count(b"data: ") - done - error  # an error event's data line is no event
        if events:
            self.events += events
            self.on_events(lines, events)
            if not self.opened.done():
                self.opened.set_result(None)
        if done or error:
            self._end(f"sse error {_error_code(lines[error_at:])}" if error else DONE)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._status is not None and self._status != 200:
            self._end(self._refused_kind())
        else:
            self._end(type(exc).__name__ if exc is not None else "ended early")

    def close(self) -> None:
        """Drop the connection (the gateway cancels the request); `ended` is "closed" unless
        the stream had ended already."""
        self._end(CLOSED)

    def _refused_kind(self) -> str:
        return f"http {self._status} {_error_code(self._refusal)}"

    def _end(self, kind: str) -> None:
        if not self.ended.done():
            self.ended.set_result(kind)
        if not self.opened.done():
            self.opened.set_result(None)
        if self.transport is not None:
            self.transport.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def _error_code(text: bytes) -> str:
    """The gateway's error `code` (else `type`) in a JSON error body or SSE error event."""
    start = text.find(b"{")
    try:
        error = json.loads(text[start : text.rfind(b"}") + 1]).get("error", {}) if start >= 0 else {}
    except ValueError:
        return "?"
    return str(error.get("code") or error.get("type") or "?") if isinstance(error, dict) else "?"


async def connect(
    host: str, port: int, request: bytes, on_events: EventsHandler, source_ip: str | None = None
) -> SseConnection:
    """A connection (from `source_ip` when given) that has sent `request`."""
    loop = asyncio.get_running_loop()
    local = None if source_ip is None else (source_ip, 0)
    _, connection = await loop.create_connection(
        lambda: SseConnection(request, on_events), host, port, local_addr=local
    )
    return connection


async def open_stream(
    host: str, port: int, request: bytes, on_events: EventsHandler, source_ip: str | None = None
) -> SseConnection:
    """Connect, send `request`, wait for the first event: the open stream, or `StreamFailed`
    when it ended before one. Cancelled, it closes the connection."""
    connection = await connect(host, port, request, on_events, source_ip)
    try:
        await connection.opened
    except BaseException:
        connection.close()
        raise
    if connection.events == 0:
        kind = connection.ended.result()
        raise StreamFailed("ended early" if kind == DONE else kind)
    return connection


async def stream_reply(host: str, port: int, request: bytes, on_tokens: Callable[[int], None]) -> None:
    """One reply, start to `[DONE]`, on a connection of its own, calling `on_tokens(n)` for each
    event that carries n > 0 token ids; `StreamFailed` otherwise. Cancelled, it closes the
    connection (the gateway cancels the request)."""

    def count_tokens(lines: bytes, _: int) -> None:
        for line in lines.split(b"\n"):
            if line.startswith(b"data: ") and b'"token_ids"' in line:
                tokens = len(json.loads(line[6:]).get("token_ids") or ())
                if tokens:
                    on_tokens(tokens)

    connection = await connect(host, port, request, count_tokens)
    try:
        kind = await connection.ended
    finally:
        connection.close()
    if kind != DONE:
        raise StreamFailed(kind)
