"""TCP ports: free ones for tests and benchmarks, and which ports each server copy gets."""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path
from typing import Protocol

from config.settings import Ports, SwitchyardConfig

_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_EPHEMERAL_FALLBACK = (32768, 60999)  # Linux's default
_LOWEST_CHOSEN = 20000  # clear of the well-known and registered services most machines run


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that were free a moment ago, below the kernel's ephemeral range.

    Below it, because a port the kernel handed out as free (bind to 0) comes from the range it
    also gives every outgoing connection: on a busy machine a client's connection could take
    it between the choice and the server's bind. All sockets stay bound until every port is
    chosen, so no port is chosen twice."""
    low, high = _EPHEMERAL_FALLBACK
    with contextlib.suppress(OSError, ValueError):
        low, high = (int(part) for part in Path(_EPHEMERAL_RANGE).read_text().split())
    first, last = (_LOWEST_CHOSEN, low - 1) if low - 1 - _LOWEST_CHOSEN >= 1000 else (high + 1, 65535)
    rng = random.SystemRandom()
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            port = rng.randint(first, last)
            if port in ports:
                continue
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
            ports.append(port)
        return ports
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
