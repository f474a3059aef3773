"""uvicorn's HTTP/1.1 protocol, with TCP_NODELAY on every connection.

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
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Send small writes at once on a TCP connection (nothing to do on a Unix socket)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class NoDelayH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with TCP_NODELAY and a deadline on each request head."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        set_nodelay(transport)
        super().connection_made(transport)
        self._await_head()

    def data_received(self, data: bytes) -> None:
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
