"""uvicorn's HTTP/1.1 protocol, with TCP_NODELAY on every connection.

With several workers uvicorn binds the listening socket itself, with protocol number 0, and
asyncio turns Nagle's algorithm off only on sockets that say IPPROTO_TCP: the workers' small
writes (an SSE event, a JSON reply) then waited for the client's delayed ACK, ~40 ms each on
a kept-alive connection (measured: 44 ms a reply with two workers, 0.56 ms with one). A token
stream must not wait on that, so every accepted connection sets it here, whatever the socket.
"""

from __future__ import annotations

import asyncio
import socket

from uvicorn.protocols.http.h11_impl import H11Protocol


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Send small writes at once on a TCP connection (nothing to do on a Unix socket)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class NoDelayH11Protocol(H11Protocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        set_nodelay(transport)
        super().connection_made(transport)
