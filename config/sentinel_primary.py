"""How a client of ours keeps to the primary the sentinels name (sentinel mode).

redis-py's Sentinel client asks the sentinels where the primary is when it opens a connection,
and a demoted primary's READONLY reply (or the sentinels' CLIENT KILL when they reconfigure it)
sends a connection back to them. Two cases escape that, both seen in `bench partitions`' split
brain (the primary cut off from its replicas and the sentinels, a gateway still reaching it):

    writes   the old primary refuses them with NOREPLICAS (`min-replicas-to-write`), which
             redis-py passes on as a plain error: `PrimaryConnection` drops the connection
             and raises ConnectionError, so the next one asks the sentinels again and every
             caller's retry treats it as Redis unreachable
    reads    nothing refuses them: a pool that only reads (the router's server directory, the
             request bus's subscription) kept reading the old primary's stale heartbeats until
             the heal, and the gateway saw its pool full for 20 s instead of ~8 s.
             `PrimaryPool` asks the sentinels every `check_s` (one query a pool, in a task of
             its own, never in a command's way) and, when they name another primary, closes
             every connection it has to the old one, idle or in use; a command or subscription
             on one fails with ConnectionError and is sent again to the new primary

While a failover is under way the pool asks five times as often (every `check_s` / 5), for up
to TROUBLE_S or until the sentinels name a new primary: from the moment the sentinels name no
primary (they see it down) or a write is refused for want of replicas. A split brain's clients
then follow the promotion within a fifth of a second instead of a second, and in calm times a
pool still costs the sentinels one query per `check_s`.

A sentinel out of reach makes a check fail quietly (the next one tries again); a command never
waits for a check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from config.redis_errors import refused_for_replicas

logger = logging.getLogger(__name__)

_REFUSED = "the primary refuses writes ({}): asking the sentinels again"
TROUBLE_S = 30.0  # how long a pool asks the sentinels faster once it has seen a failover begin
TROUBLE_SPEEDUP = 5  # how much faster


class PrimaryPool(redis.asyncio.sentinel.SentinelConnectionPool, redis.asyncio.BlockingConnectionPool):
    """The primary's connections through the sentinels, bounded and waiting like
    BlockingConnectionPool (redis-py has no such pool of its own), that leave a primary the
    sentinels no longer name within `check_s` (0: never checked, as redis-py does)."""

    def __init__(self, service_name: str, sentinel_manager: Any, *, check_s: float = 1.0, **kwargs: Any) -> None:
        super().__init__(service_name, sentinel_manager, **kwargs)  # type: ignore[no-untyped-call]
        self.check_s = check_s
        self._watch: asyncio.Task[None] | None = None
        self._troubled_until = 0.0  # monotonic: ask faster until then (a failover under way)

    def troubled(self) -> None:
        """A failover looks under way (no primary named, a write refused for want of replicas):
        ask the sentinels TROUBLE_SPEEDUP times as often, until they name a new primary or
        TROUBLE_S have passed."""
        self._troubled_until = time.monotonic() + TROUBLE_S

    def next_check_s(self) -> float:
        """How long until the next check: `check_s`, or a fifth of it while troubled."""
        if time.monotonic() < self._troubled_until:
            return self.check_s / TROUBLE_SPEEDUP
        return self.check_s

    async def get_master_address(self) -> Any:
        before = self.master_address
        try:
            address = await super().get_master_address()  # type: ignore[no-untyped-call]
        except redis.sentinel.MasterNotFoundError:
            self.troubled()
            raise
        self._calm_if_moved(before, address)
        return address

    def _calm_if_moved(self, before: Any, address: Any) -> None:
        if before is not None and tuple(before) != tuple(address):
            self._troubled_until = 0.0  # a new primary named: back to the calm pace

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if self.check_s > 0 and (self._watch is None or self._watch.done()):
            # The watch holds the pool weakly: it ends when the pool is dropped or closed.
            self._watch = asyncio.create_task(_watch(weakref.ref(self), self.check_s), name="sentinel-primary-watch")
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]

    async def check_primary(self) -> bool:
        """Ask the sentinels where the primary is; close this pool's connections (idle and in
        use) that go anywhere else. True when some were closed.

        Compared with the connections, not with `master_address`: a connection opened for a
        write may have learnt the new primary first (which closes idle connections only)."""
        try:
            address = tuple(await self.sentinel_manager.discover_master(self.service_name))
        except (redis.RedisError, OSError) as exc:  # no sentinel in reach, none agrees: next time
            if isinstance(exc, redis.sentinel.MasterNotFoundError):
                self.troubled()  # the sentinels see the primary down: a failover is coming
            logger.debug("no primary from the sentinels (%s): checking again in %.1f s", exc, self.next_check_s())
            return False
        self._calm_if_moved(self.master_address, address)
        self.master_address = address
        stale = {
            c: _address(c)
            for c in (*self._available_connections, *self._in_use_connections)
            if c.is_connected and _address(c) != address
        }
        if not stale:
            return False
        logger.warning(
            "the sentinels name %s:%s as the primary: closing %d connection(s) to %s",
            *address, len(stale), ", ".join(sorted({f"{host}:{port}" for host, port in stale.values()})),
        )  # fmt: skip
        for connection in stale:
            with contextlib.suppress(Exception):  # already broken: closed all the same
                await connection.disconnect()
        return True

    async def disconnect(self, inuse_connections: bool = True) -> None:
        if inuse_connections and self._watch is not None:  # the client is closing
            self._watch.cancel()
        await super().disconnect(inuse_connections)


def _address(connection: Any) -> tuple[Any, Any]:
    """Where `connection` went (a sentinel-managed connection's host and port are the primary's
    it connected to)."""
    return getattr(connection, "host", None), getattr(connection, "port", None)


async def _watch(pool_ref: weakref.ref[PrimaryPool], every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        pool = pool_ref()
        if pool is None:
            return
        await pool.check_primary()
        every_s = pool.next_check_s()
        del pool  # hold no reference while sleeping


class PrimaryConnection(redis.asyncio.sentinel.SentinelManagedConnection):
    """A connection to the primary the sentinels named that asks them again when that primary
    refuses writes for want of replicas (NOREPLICAS): cut off from its replicas and sentinels,
    it may already have been replaced on the other side of a partition. redis-py does this for
    READONLY (a demoted primary) but not for NOREPLICAS: the gateways kept writing to the old
    primary, refused, until the partition healed (`bench partitions`' split brain: 20.6 s of
    failures, the new primary elected at 7.2 s). As a ConnectionError, the caller retries."""

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except redis.ResponseError as exc:
            if not (self.connection_pool.is_master and refused_for_replicas(exc)):
                raise
            if isinstance(self.connection_pool, PrimaryPool):
                self.connection_pool.troubled()
            await self.disconnect()
            raise redis.ConnectionError(_REFUSED.format(exc)) from exc


class PrimarySSLConnection(PrimaryConnection, redis.asyncio.SSLConnection):
    pass


class SyncPrimaryConnection(redis.sentinel.SentinelManagedConnection):
    """`PrimaryConnection` for the blocking clients (CLI, launchers: short-lived, so no watch)."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except redis.ResponseError as exc:
            if not (self.connection_pool.is_master and refused_for_replicas(exc)):
                raise
            self.disconnect()  # type: ignore[no-untyped-call]
            raise redis.ConnectionError(_REFUSED.format(exc)) from exc


class SyncPrimarySSLConnection(SyncPrimaryConnection, redis.SSLConnection):
    pass
