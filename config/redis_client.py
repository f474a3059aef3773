"""The one way a Redis client of ours is made: `redis_client(config, component)`.

    redis.sentinels empty ──▶ Redis.from_url(config.redis_url(component), **options)
    redis.sentinels set   ──▶ Sentinel([...], sentinel_kwargs=login).master_for(master_name)

A Sentinel client asks the sentinels where the primary is whenever it opens a connection; a
connection to a primary that was demoted answers READONLY, which redis-py turns into a
reconnect. So after a failover a client's next commands reach the new primary without a
restart; the commands in flight while it happens fail with a `ConnectionError`, as they would
if a single Redis restarted (docs/redis.md). Each component logs in to the sentinels with its
own user and password (the sentinels' ACL grants SENTINEL queries only).

`options` are a site's own connection settings (timeouts, `decode_responses`, ...), passed on
as they are; the socket timeouts also apply to the sentinel queries.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio

from config.internal_secrets import RedisComponent
from config.settings import SwitchyardConfig

# Connection settings that also bound a query to a sentinel.
_SENTINEL_SOCKET_OPTIONS = ("socket_timeout", "socket_connect_timeout")


def redis_client(config: SwitchyardConfig, component: RedisComponent, **options: Any) -> redis.asyncio.Redis:
    """An asyncio client for `component`, following failovers in sentinel mode."""
    spec = config.redis
    if not spec.sentinels:
        return redis.asyncio.Redis.from_url(config.redis_url(component), **options)
    connection, sentinel_options = _sentinel_arguments(config, component, options)
    sentinel = redis.asyncio.Sentinel(  # type: ignore[no-untyped-call]  # redis-py's own hints
        [(s.host, s.port) for s in spec.sentinels], sentinel_kwargs=sentinel_options, **connection
    )
    client: redis.asyncio.Redis = sentinel.master_for(spec.master_name)
    return client


def sync_redis_client(config: SwitchyardConfig, component: RedisComponent, **options: Any) -> redis.Redis:
    """A blocking client for `component` (CLI, launchers, tests), the same way."""
    spec = config.redis
    if not spec.sentinels:
        return redis.Redis.from_url(config.redis_url(component), **options)
    connection, sentinel_options = _sentinel_arguments(config, component, options)
    sentinel = redis.Sentinel(  # type: ignore[no-untyped-call]  # redis-py's own hints
        [(s.host, s.port) for s in spec.sentinels], sentinel_kwargs=sentinel_options, **connection
    )
    client: redis.Redis = sentinel.master_for(spec.master_name)  # type: ignore[no-untyped-call]
    return client


def _sentinel_arguments(
    config: SwitchyardConfig, component: RedisComponent, options: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the primary's connection arguments, the sentinels'): the same login and TLS for both."""
    login = config.redis.connection_options(component, root=config.root, secrets_path=config.secrets_path)
    sentinel_options = {key: value for key, value in login.items() if key != "db"}
    sentinel_options.update({key: options[key] for key in _SENTINEL_SOCKET_OPTIONS if key in options})
    return {**login, **options}, sentinel_options
