"""Free TCP ports on the loopback interface, for servers started by tests and benchmarks."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that were free a moment ago.

    All sockets stay bound until every port is chosen: closing each one before binding the
    next lets the kernel hand the same port out twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
