"""`config.sentinel_primary.PrimaryPool`: a check that finds the sentinels naming another primary
closes this pool's connections to the old one, idle and in use, and only those; while a
failover is under way it checks five times as often. (Against real sentinels behind a
partition: tests/integration/test_split_brain_readers.py.)"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from config.sentinel_primary import TROUBLE_SPEEDUP, PrimaryConnection, PrimaryPool


class _Connected(PrimaryConnection):
    """A connection that says it is open (these tests never open one)."""

    is_connected = True  # type: ignore[assignment]


class _Sentinels:
    """Answers `discover_master` with whatever the test sets (a fake of the sentinels only)."""

    def __init__(self, primary: tuple[str, int]) -> None:
        self.primary: tuple[str, int] | None = primary

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        if self.primary is None:
            raise redis.sentinel.MasterNotFoundError(f"no primary for {service_name}")
        return self.primary


def _connection(pool: PrimaryPool, host: str, port: int, closed: list[tuple[str, int]]) -> PrimaryConnection:
    connection: PrimaryConnection = _Connected(connection_pool=pool)  # type: ignore[no-untyped-call]
    connection.host, connection.port = host, port

    async def disconnect(*_: Any, **__: Any) -> None:
        closed.append((host, port))

    connection.disconnect = disconnect  # type: ignore[method-assign]
    return connection


async def test_a_new_primary_closes_the_connections_to_the_old_one_idle_and_in_use() -> None:
    sentinels = _Sentinels(("old", 1))
    pool = PrimaryPool("sy", sentinels, check_s=0, connection_class=_Connected)
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


async def test_a_connection_to_the_old_primary_is_closed_even_when_a_write_learnt_the_new_one_first() -> None:
    """A write's reconnect asked the sentinels first (it updates `master_address` and closes
    idle connections only): a subscription still on the old primary is closed all the same."""
    sentinels = _Sentinels(("new", 2))
    pool = PrimaryPool("sy", sentinels, check_s=0, connection_class=_Connected)
    pool.master_address = ("new", 2)
    closed: list[tuple[str, int]] = []
    pool._in_use_connections.add(_connection(pool, "old", 1, closed))
    assert await pool.check_primary()
    assert closed == [("old", 1)]


async def test_a_failover_under_way_makes_the_checks_faster_until_a_new_primary_is_named() -> None:
    sentinels = _Sentinels(("old", 1))
    pool = PrimaryPool("sy", sentinels, check_s=1.0, connection_class=_Connected)
    pool.master_address = ("old", 1)
    assert pool.next_check_s() == 1.0

    sentinels.primary = None  # the sentinels see the primary down
    assert not await pool.check_primary()
    assert pool.next_check_s() == 1.0 / TROUBLE_SPEEDUP

    sentinels.primary = ("old", 1)  # a sentinel that does not see it down yet: still troubled
    assert not await pool.check_primary()
    assert pool.next_check_s() == 1.0 / TROUBLE_SPEEDUP

    sentinels.primary = ("new", 2)
    await pool.check_primary()
    assert pool.next_check_s() == 1.0

    pool.troubled()  # a write refused for want of replicas (PrimaryConnection)
    assert pool.next_check_s() == 1.0 / TROUBLE_SPEEDUP
    sentinels.primary = None
    with pytest.raises(redis.sentinel.MasterNotFoundError):
        await pool.get_master_address()  # a connection's own attempt, refused: troubled still
    sentinels.primary = ("newer", 3)
    assert await pool.get_master_address() == ("newer", 3)
    assert pool.next_check_s() == 1.0
