"""uvicorn's HTTP/1.1 protocols, with TCP_NODELAY on every connection: h11's here, httptools'
(what the gateway serves with) in gateway/httptools_protocol.py, both behaving as below.

With several workers uvicorn binds the listening socket itself, with protocol number 0, and
asyncio turns Nagle's algorithm off only on sockets that say IPPROTO_TCP: the workers' small
writes (an SSE event, a JSON reply) then waited for the client's delayed ACK, ~40 ms each on
a kept-alive connection (measured: 44 ms a reply with two workers, 0.56 ms with one). A token
stream must not wait on that, so every accepted connection sets it here, whatever the socket.

It also gives every request head a deadline. uvicorn times out only a connection that sends
nothing after a response: one that opens and stays silent, or sends its headers a byte at a
time, held its socket for ever. Here a request's head must be complete within uvicorn's
`timeout_keep_alive` of the connection opening or of the previous response ending, or the
connection is closed. (The body has its own limits: gateway/edge_guard.py.)

A head h11 refuses is answered in the one JSON error shape (contracts/errors.py), not uvicorn's
plain-text 400: 431 for a head past h11's 16 KiB (`h11_max_incomplete_event_size`), 400 for one
that is not HTTP/1.1. The connection then closes lingering (as nginx does): the write side
first, the rest of what the client sends read and dropped for up to `LINGER_S`, so the unread
bytes don't make the kernel reset the connection before the client has read its answer.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from contracts.errors import error_detail, error_kind

# How long a refused connection's remaining input is read and dropped before it is closed.
LINGER_S = 2.0


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Send small writes at once on a TCP connection (nothing to do on a Unix socket)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class HintedConnection(h11.Connection):
    """h11's server connection that keeps the status its last protocol error hints (h11 says
    431 for a head too large; uvicorn drops the hint and answers 400 in plain text)."""

    def __init__(self, max_incomplete_event_size: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_incomplete_event_size)
        self.refusal: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.refusal = exc
            raise


def refusal_body(status: int, reason: str) -> bytes:
    """The JSON error answering a refused head: `status` 431 (too large) or 400 (`reason`)."""
    if status == 431:
        message = "the request's headers are too large; send under 16 KiB of request line and headers"
        code = "request_header_fields_too_large"
    else:
        message = f"the request is not valid HTTP/1.1 ({reason[:200]})"
        code = "invalid_http_request"
    error_type, settled = error_kind(status, "invalid_request_error", code)
    return json.dumps({"error": error_detail(error_type, message, None, settled)}, separators=(",", ":")).encode()


def refusal_response(refusal: h11.RemoteProtocolError | None) -> tuple[int, bytes]:
    """The status and JSON body answering a head h11 refused."""
    status = 431 if refusal is not None and refusal.error_status_hint == 431 else 400
    return status, refusal_body(status, str(refusal) if refusal is not None else "malformed")


class NoDelayH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with TCP_NODELAY, a deadline on each request head, and refused
    heads answered as JSON errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_deadline: asyncio.TimerHandle | None = None
        self.conn: HintedConnection = HintedConnection(self.conn._max_incomplete_event_size)
        self.lingering = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        set_nodelay(transport)
        super().connection_made(transport)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return  # what a refused client still sends, dropped until the connection closes
        super().data_received(data)
        if self.head_deadline is not None and self.cycle is not None and not self.cycle.response_complete:
            self._stop_waiting()  # a request's head arrived: its body is the edge guard's

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._stop_waiting()
        self.head_deadline = self.loop.call_later(self.timeout_keep_alive, self._head_too_slow)

    def _stop_waiting(self) -> None:
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def _head_too_slow(self) -> None:
        self.head_deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a head h11 refused: here 431 or 400 as JSON, then a lingering
        close (the module's docstring says why)."""
        self._stop_waiting()
        status, body = refusal_response(self.conn.refusal)
        headers = [("content-type", "application/json"), ("content-length", str(len(body))), ("connection", "close")]
        for event in (h11.Response(status_code=status, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        self.lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)
