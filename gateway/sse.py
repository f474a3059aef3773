"""Server-sent events framing for /v1/generate streams.

    data: {"request_id": "r1", "text": "Hel", "token_ids": [15, 2]}      one per delta
    data: {"request_id": "r1", "text": "", "stop_reason": "length", "usage": {...}}
    data: [DONE]

A failure after the stream started ends it with `event: error` and the usual error body
instead of the final event. While nothing happens, a `: keep-alive` comment goes out every
`heartbeat_s`, so proxies keep the connection and a client that left is noticed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from contracts.errors import error_payload
from serving.readers import reading
from serving.requests_registry import InflightRequest, RequestRegistry

HEARTBEAT = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"


def sse_event(data: dict[str, Any], event: str | None = None) -> bytes:
    """One SSE event. JSON never contains a raw newline, so one `data:` line suffices.

    orjson writes what `json.dumps(data, ensure_ascii=False, separators=(",", ":"))` wrote,
    UTF-8 encoded (compact, non-ASCII as is, tuples as arrays), in ~0.2 µs against ~2.7 µs an
    event; but NaN, which it writes as null (valid JSON), and floats' notation (0.00001 for
    1e-05, the same number)."""
    head = b"event: %s\n" % event.encode() if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


async def stream_events(entry: InflightRequest, registry: RequestRegistry, heartbeat_s: float) -> AsyncIterator[bytes]:
    """The SSE body of one request. If the response closes before the request ends (the
    client went away), the request is cancelled, which frees the server's KV.

    The events ready at once go out as one chunk (one socket write): every delta that arrived
    since the last, and the end (the final event and [DONE]) with the last deltas. A short
    reply often arrives whole, and each write is a system call of the worker's."""
    request_id = entry.public_id
    seen = 0
    with reading(entry, registry):
        while True:
            ready = [
                sse_event({"request_id": request_id, "text": delta.text, "token_ids": delta.token_ids})
                for delta in entry.deltas[seen:]
            ]
            seen += len(ready)
            if entry.done:
                yield b"".join([*ready, _ending(entry, request_id)])
                return
            if ready:
                yield b"".join(ready)
            if not await entry.wait_changed(seen, timeout=heartbeat_s):
                yield HEARTBEAT


def _ending(entry: InflightRequest, request_id: str) -> bytes:
    """The error event, or the final event with the usage and [DONE]."""
    if entry.error is not None:
        return sse_event({"request_id": request_id, **error_payload(entry.error)}, event="error")
    final = {"request_id": request_id, "text": "", "stop_reason": entry.stop_reason, "usage": entry.usage.as_dict()}
    return sse_event(final) + DONE
