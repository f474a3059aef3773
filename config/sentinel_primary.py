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

A sentinel out of reach makes a check fail quietly (the next one tries again); a command never
waits for a check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from config.redis_errors import refused_for_replicas

logger = logging.getLogger(__name__)

_REFUSED = "the primary refuses writes ({}): asking the sentinels again"


class PrimaryPool(redis.asyncio.sentinel.SentinelConnectionPool, redis.asyncio.BlockingConnectionPool):
    """The primary's connections through the sentinels, bounded and waiting like
    BlockingConnectionPool (redis-py has no such pool of its own), that leave a primary the
    sentinels no longer name within `check_s` (0: never checked, as redis-py does)."""

    def __init__(self, service_name: str, sentinel_manager: Any, *, check_s: float = 1.0, **kwargs: Any) -> None:
        super().__init__(service_name, sentinel_manager, **kwargs)  # type: ignore[no-untyped-call]
        self.check_s = check_s
        self._watch: asyncio.Task[None] | None = None

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if self.check_s > 0 and (self._watch is None or self._watch.done()):
            # The watch holds the pool weakly: it ends when the pool is dropped or closed.
            self._watch = asyncio.create_task(_watch(weakref.ref(self), self.check_s), name="sentinel-primary-watch")
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]

    async def check_primary(self) -> bool:
        """Ask the sentinels where the primary is; if not where this pool's connections go,
        close those connections (idle and in use). True when they were moved."""
        try:
            address = await self.sentinel_manager.discover_master(self.service_name)
        except (redis.RedisError, OSError) as exc:  # no sentinel in reach, none agrees: next time
            logger.debug("no primary from the sentinels (%s): checking again in %.1f s", exc, self.check_s)
            return False
        old = self.master_address
        if old is None or tuple(address) == tuple(old):
            return False
        self.master_address = address
        stale = [
            c
            for c in (*self._available_connections, *self._in_use_connections)
            if (getattr(c, "host", None), getattr(c, "port", None)) != tuple(address)
        ]
        logger.warning(
            "the sentinels name %s:%s as the primary, no longer %s:%s: closing %d connection(s) to the old one",
            *address, *old, len(stale),
        )  # fmt: skip
        for connection in stale:
            with contextlib.suppress(Exception):  # already broken: closed all the same
                await connection.disconnect()
        return True

    async def disconnect(self, inuse_connections: bool = True) -> None:
        if inuse_connections and self._watch is not None:  # the client is closing
            self._watch.cancel()
        await super().disconnect(inuse_connections)


async def _watch(pool_ref: weakref.ref[PrimaryPool], every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        pool = pool_ref()
        if pool is None:
            return
        await pool.check_primary()
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
