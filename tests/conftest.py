"""Fixtures every suite may use: a real `redis-server` started for the session.

It runs as `make up`'s does: ACL users per component, `default` off. `redis_url` is the
`admin` user's (what tests use to arrange and inspect); a config that points at this Redis
names `redis_secrets` as its `secrets_dir`, so its components log in as their own users and
the suite proves those users may do what the components do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from server_host.ports import free_ports
from stack.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server on a free port, data in a temporary folder; stopped at the end."""
    root = tmp_path_factory.mktemp("redis")
    (port,) = free_ports(1)
    server = RedisServer(port, root / "data", root / "redis.log", secrets_dir=root / "secrets")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The session's Redis, emptied before each test that asks for it."""
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushall()
    yield redis_server.url


@pytest.fixture()
def redis_secrets(redis_server: RedisServer) -> Path:
    """The session Redis's secrets folder: `secrets_dir` of a config that uses it."""
    return redis_server.secrets_dir
