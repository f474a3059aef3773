"""RedisServer: a real redis-server starts, answers, keeps data append-only, and stops."""

from __future__ import annotations

from pathlib import Path

import redis

from fleet.launch.ports import free_ports
from fleet.launch.redis_server import RedisServer


def test_data_survives_a_restart(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    server = RedisServer(port, tmp_path / "data", tmp_path / "redis.log")
    server.start()
    try:
        redis.Redis.from_url(server.url).set("accepted", "1")
    finally:
        server.stop()
    assert not server.ping()
    again = RedisServer(port, tmp_path / "data", tmp_path / "redis.log")
    again.start()
    try:
        assert redis.Redis.from_url(again.url).get("accepted") == b"1"
    finally:
        again.stop()


def test_redis_url_fixture_starts_empty(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    assert client.dbsize() == 0
    client.set("k", "v")
