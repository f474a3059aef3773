"""uvicorn's httptools protocol (llhttp's C parser), with what gateway/http_protocol.py gives h11's:
TCP_NODELAY on every connection, a deadline on each request head, and a head the parser refuses
answered in the one JSON error shape, then a lingering close.

h11 holds a head to 16 KiB itself; llhttp has no such limit (it keeps a header that has not
ended in a buffer of its own), so the head is counted here, two ways:

    bytes received since the head was awaited  > 16 KiB, head not complete  ─▶  431
    request line and headers as parsed         > 16 KiB                     ─▶  431

The first bounds a head that never ends (whatever llhttp buffers); the second a large head that
arrives whole in one read. Anything else llhttp refuses is a 400 that names its reason.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.http_protocol import LINGER_S, refusal_body, set_nodelay

# A request line and headers past this are refused with 431 (h11's limit, which uvicorn keeps).
MAX_HEAD_BYTES = 16 * 1024


class HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head past MAX_HEAD_BYTES."""


class NoDelayHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with TCP_NODELAY, a deadline and a size limit on each request
    head, and refused heads answered as JSON errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_deadline: asyncio.TimerHandle | None = None
        # Bytes received while the head is awaited; None once it arrived (the body is the edge
        # guard's: gateway/edge_guard.py).
        self.head_received: int | None = 0
        self.head_parsed = 0  # the request line and headers llhttp has handed over
        self.refused_status: int | None = None  # 431 when a callback stopped a head too large
        self.lingering = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        set_nodelay(transport)
        super().connection_made(transport)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return  # what a refused client still sends, dropped until the connection closes
        if self.head_received is not None:
            self.head_received += len(data)
        super().data_received(data)  # a head llhttp refuses: send_400_response
        if not self.lingering and self.head_received is not None and self.head_received > MAX_HEAD_BYTES:
            self._refuse(431, "too large")

    # llhttp's callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_parsed = 0

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.head_received = None
        self._stop_waiting()  # a request's head arrived
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # the next request's head already arrived
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a head llhttp refused (called while handling its error): here 431
        or 400 as JSON, then a lingering close."""
        refused = sys.exc_info()[1]
        self._refuse(self.refused_status or 400, str(refused) if refused is not None else msg)

    def _count_head(self, size: int) -> None:
        self.head_parsed += size
        if self.head_parsed > MAX_HEAD_BYTES:
            self.refused_status = 431
            raise HeadTooLarge  # llhttp stops; uvicorn calls send_400_response

    def _await_head(self) -> None:
        self._stop_waiting()
        self.head_received = 0
        self.head_deadline = self.loop.call_later(self.timeout_keep_alive, self._head_too_slow)

    def _stop_waiting(self) -> None:
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def _head_too_slow(self) -> None:
        self.head_deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def _refuse(self, status: int, reason: str) -> None:
        """Answer `status` as JSON and close lingering (gateway/http_protocol.py says why)."""
        self._stop_waiting()
        self.head_received = None
        self.lingering = True
        body = refusal_body(status, reason)
        content = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.append(b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body))
        content.extend([b"connection: close\r\n\r\n", body])
        self.transport.write(b"".join(content))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)
