"""`config.sentinel_primary.PrimaryPool`: a check that finds the sentinels naming another primary
closes this pool's connections to the old one, idle and in use, and only those. (Against real
sentinels behind a partition: tests/integration/test_split_brain_readers.py.)"""

from __future__ import annotations

from typing import Any

import redis

from config.sentinel_primary import PrimaryConnection, PrimaryPool


class _Sentinels:
    """Answers `discover_master` with whatever the test sets (a fake of the sentinels only)."""

    def __init__(self, primary: tuple[str, int]) -> None:
        self.primary: tuple[str, int] | None = primary

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        if self.primary is None:
            raise redis.sentinel.MasterNotFoundError(f"no primary for {service_name}")
        return self.primary


def _connection(pool: PrimaryPool, host: str, port: int, closed: list[tuple[str, int]]) -> PrimaryConnection:
    connection: PrimaryConnection = pool.make_connection()  # type: ignore[no-untyped-call]
    connection.host, connection.port = host, port

    async def disconnect(*_: Any, **__: Any) -> None:
        closed.append((host, port))

    connection.disconnect = disconnect  # type: ignore[method-assign]
    return connection


async def test_a_new_primary_closes_the_connections_to_the_old_one_idle_and_in_use() -> None:
    sentinels = _Sentinels(("old", 1))
    pool = PrimaryPool("sy", sentinels, check_s=0, connection_class=PrimaryConnection)
    pool.master_address = ("old", 1)
    closed: list[tuple[str, int]] = []
    idle, busy = _connection(pool, "old", 1, closed), _connection(pool, "old", 1, closed)
    pool._available_connections.append(idle)
    pool._in_use_connections.add(busy)

    assert not await pool.check_primary()  # the same primary: nothing closed
    sentinels.primary = None
    assert not await pool.check_primary()  # no sentinel answers: nothing closed either
    assert closed == []

    sentinels.primary = ("new", 2)
    fresh = _connection(pool, "new", 2, closed)
    pool._in_use_connections.add(fresh)
    assert await pool.check_primary()
    assert closed == [("old", 1), ("old", 1)] and pool.master_address == ("new", 2)
