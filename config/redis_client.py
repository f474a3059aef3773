"""The one way a Redis client of ours is made: `redis_client(config, component)`.

    redis.sentinels empty ──▶ a client over a BlockingConnectionPool of config.redis's size
    redis.sentinels set   ──▶ Sentinel([...], sentinel_kwargs=login).master_for(master_name),
                              over the same kind of pool

Every client's connections are bounded (`redis.max_connections`, 32 by default): a command
that finds them all busy waits up to `redis.pool_timeout_s` for one, then fails with a
`ConnectionError` — a process's connections never grow with its requests in flight, and a
burst of requests queues for a few milliseconds instead of failing at once. (redis-py's own
default is a pool of 100 that raises "Too many connections" at the 101st; older versions
were unbounded.) Every connection has TCP keepalive (probes after
`redis.keepalive_idle_s` idle, three a second apart) and a health check before reuse after
`redis.health_check_s` idle, so a peer gone silent is noticed in seconds, not TCP's minutes;
a command whose reply is `redis.socket_timeout_s` late fails, and so does a connection not made
within `redis.connect_timeout_s` (keepalive probes do not run while a command waits).

A Sentinel client asks the sentinels where the primary is whenever it opens a connection; a
connection to a primary that was demoted answers READONLY, which redis-py turns into a
reconnect. So after a failover a client's next commands reach the new primary without a
restart; the commands in flight while it happens fail with a `ConnectionError`, as they would
if a single Redis restarted (docs/redis.md). Each component logs in to the sentinels with its
own user and password (the sentinels' ACL grants SENTINEL queries only).

`options` are a call site's own connection settings (socket timeouts, `decode_responses`,
a pool size for a client of its own, ...), passed on as they are; the socket timeouts also
apply to the sentinel queries.
"""

from __future__ import annotations

import socket
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from config.internal_secrets import RedisComponent
from config.redis_errors import refused_for_replicas
from config.redis_settings import RedisSpec
from config.settings import SwitchyardConfig

# Connection settings that also bound a query to a sentinel.
_SENTINEL_SOCKET_OPTIONS = ("socket_timeout", "socket_connect_timeout", "socket_keepalive", "socket_keepalive_options")
_KEEPALIVE_INTERVAL_S = 1
_KEEPALIVE_PROBES = 3


class _BlockingSentinelPool(redis.asyncio.sentinel.SentinelConnectionPool, redis.asyncio.BlockingConnectionPool):
    """The primary's connections through the sentinels, bounded and waiting like
    BlockingConnectionPool (redis-py has no such pool of its own)."""


class _PrimaryConnection(redis.asyncio.sentinel.SentinelManagedConnection):
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
            raise redis.ConnectionError(f"the primary refuses writes ({exc}): asking the sentinels again") from exc


class _PrimarySSLConnection(_PrimaryConnection, redis.asyncio.SSLConnection):
    pass


class _SyncPrimaryConnection(redis.sentinel.SentinelManagedConnection):
    """`_PrimaryConnection` for the blocking clients."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except redis.ResponseError as exc:
            if not (self.connection_pool.is_master and refused_for_replicas(exc)):
                raise
            self.disconnect()  # type: ignore[no-untyped-call]
            raise redis.ConnectionError(f"the primary refuses writes ({exc}): asking the sentinels again") from exc


class _SyncPrimarySSLConnection(_SyncPrimaryConnection, redis.SSLConnection):
    pass


def connection_settings(spec: RedisSpec) -> dict[str, Any]:
    """The bounds and keepalives every client of ours gets (a call's `options` override them)."""
    keepalive: dict[int, int] = {}
    for name, value in (
        ("TCP_KEEPIDLE", spec.keepalive_idle_s),
        ("TCP_KEEPINTVL", _KEEPALIVE_INTERVAL_S),
        ("TCP_KEEPCNT", _KEEPALIVE_PROBES),
    ):
        if hasattr(socket, name):  # Linux has all three; others keep their defaults
            keepalive[getattr(socket, name)] = value
    return {
        "max_connections": spec.max_connections,
        "socket_keepalive": True,
        "socket_keepalive_options": keepalive,
        "health_check_interval": spec.health_check_s,
        "socket_timeout": spec.socket_timeout_s,
        "socket_connect_timeout": spec.connect_timeout_s,
    }


def redis_client(config: SwitchyardConfig, component: RedisComponent, **options: Any) -> redis.asyncio.Redis:
    """An asyncio client for `component` over a bounded, waiting pool, following failovers in
    sentinel mode."""
    spec = config.redis
    settings = {**connection_settings(spec), "timeout": spec.pool_timeout_s, **options}
    if not spec.sentinels:
        pool = redis.asyncio.BlockingConnectionPool.from_url(config.redis_url(component), **settings)
        return redis.asyncio.Redis.from_pool(pool)
    connection, sentinel_options = _sentinel_arguments(config, component, settings)
    sentinel = redis.asyncio.Sentinel(  # type: ignore[no-untyped-call]  # redis-py's own hints
        [(s.host, s.port) for s in spec.sentinels], sentinel_kwargs=sentinel_options, **connection
    )
    connection_class = _PrimarySSLConnection if connection.get("ssl") else _PrimaryConnection
    client: redis.asyncio.Redis = sentinel.master_for(
        spec.master_name, connection_pool_class=_BlockingSentinelPool, connection_class=connection_class
    )
    return client


def sync_redis_client(config: SwitchyardConfig, component: RedisComponent, **options: Any) -> redis.Redis:
    """A blocking client for `component` (CLI, launchers, tests), bounded the same way; one
    thread uses it at a time, so a full pool is an error rather than a wait."""
    spec = config.redis
    settings = {**connection_settings(spec), **options}
    if not spec.sentinels:
        return redis.Redis.from_url(config.redis_url(component), **settings)
    connection, sentinel_options = _sentinel_arguments(config, component, settings)
    sentinel = redis.Sentinel(  # type: ignore[no-untyped-call]  # redis-py's own hints
        [(s.host, s.port) for s in spec.sentinels], sentinel_kwargs=sentinel_options, **connection
    )
    connection_class = _SyncPrimarySSLConnection if connection.get("ssl") else _SyncPrimaryConnection
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        spec.master_name, connection_class=connection_class
    )
    return client


def _sentinel_arguments(
    config: SwitchyardConfig, component: RedisComponent, options: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the primary's connection arguments, the sentinels'): the same login and TLS for both."""
    login = config.redis.connection_options(component, root=config.root, secrets_path=config.secrets_path)
    sentinel_options = {key: value for key, value in login.items() if key != "db"}
    sentinel_options.update({key: options[key] for key in _SENTINEL_SOCKET_OPTIONS if key in options})
    return {**login, **options}, sentinel_options
