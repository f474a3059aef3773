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
reconnect, and a primary refusing writes for want of replicas (NOREPLICAS) or no longer the
one the sentinels name (checked every `redis.primary_check_s`) does too
(config/sentinel_primary.py: a partition's split brain). So after a failover a client's next
commands reach the new primary without a restart; the commands in flight while it happens
fail with a `ConnectionError`, as they would if a single Redis restarted (docs/redis.md).
Each component logs in to the sentinels with its own user and password (the sentinels' ACL
grants SENTINEL queries only).

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
from config.redis_settings import RedisSpec
from config.sentinel_primary import (
    PrimaryConnection,
    PrimaryPool,
    PrimarySSLConnection,
    SyncPrimaryConnection,
    SyncPrimarySSLConnection,
)
from config.settings import SwitchyardConfig

# Connection settings that also bound a query to a sentinel.
_SENTINEL_SOCKET_OPTIONS = ("socket_timeout", "socket_connect_timeout", "socket_keepalive", "socket_keepalive_options")
_KEEPALIVE_INTERVAL_S = 1
_KEEPALIVE_PROBES = 3


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
    connection_class = PrimarySSLConnection if connection.get("ssl") else PrimaryConnection
    client: redis.asyncio.Redis = sentinel.master_for(
        spec.master_name,
        connection_pool_class=PrimaryPool,
        connection_class=connection_class,
        check_s=spec.primary_check_s,
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
    connection_class = SyncPrimarySSLConnection if connection.get("ssl") else SyncPrimaryConnection
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
