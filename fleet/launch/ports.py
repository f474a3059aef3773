"""TCP ports: free ones for tests and benchmarks, and which ports each server copy gets."""

from __future__ import annotations

import socket
from typing import Protocol

from config.settings import Ports, SwitchyardConfig


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


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on `port` now (SO_REUSEADDR, as servers bind)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


class PortAllocator(Protocol):
    """Which ports copy `copy` of pool `pool_id` listens on; the same answer every time, so a
    restarted server comes back where its clients knew it."""

    def ports(self, pool_id: str, copy: int) -> Ports: ...


class ConfiguredPorts:
    """What `make up` uses: the pool's configured ports + 10·copy (`PoolSpec.copy_ports`)."""

    def __init__(self, config: SwitchyardConfig) -> None:
        self._config = config

    def ports(self, pool_id: str, copy: int) -> Ports:
        return self._config.pools[pool_id].copy_ports(copy)


class FreePorts:
    """Free ports per copy, chosen on first use and kept (tests: nothing collides)."""

    def __init__(self) -> None:
        self._chosen: dict[tuple[str, int], Ports] = {}

    def ports(self, pool_id: str, copy: int) -> Ports:
        if (pool_id, copy) not in self._chosen:
            http, grpc, metrics = free_ports(3)
            self._chosen[pool_id, copy] = Ports(http=http, grpc=grpc, metrics=metrics)
        return self._chosen[pool_id, copy]
