"""Fixtures every suite may use: a real `redis-server` started for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from fleet.launch.ports import free_ports
from fleet.launch.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server on a free port, data in a temporary folder; stopped at the end."""
    root = tmp_path_factory.mktemp("redis")
    (port,) = free_ports(1)
    server = RedisServer(port, root / "data", root / "redis.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The session's Redis, emptied before each test that asks for it."""
    redis.Redis.from_url(redis_server.url).flushall()
    yield redis_server.url
