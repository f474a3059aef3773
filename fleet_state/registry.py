"""The fleet's servers in Redis: who runs where, in which state, last seen when.

    sy:servers            SET   of server ids
    sy:server:{id}        HASH  server_id pool_id host http_port grpc_port metrics_port gpus
                                state state_since started_at heartbeat_at pid

Supervisors write (register, heartbeat every ~0.5 s, set_state, deregister); gateways read
`servers(pool_id)` and route only to READY ones; `switchyard drain` asks for a drain by
setting the state to DRAINING, which the server's supervisor sees and acts on.

A heartbeat older than `dead_after_s` reads as DEAD whatever the stored state says: a
supervisor that died cannot mark its servers dead, so readers must not trust them. Drain is
one way: a DRAINING server may only become DEAD (or be deregistered), never READY again, so a
supervisor that raced a drain request cannot undo it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import redis.asyncio

from fleet_state.server_state import ServerState

SERVERS_KEY = "sy:servers"
# A server id is published here when it joins, leaves or changes state: gateways re-read the
# registry at once instead of at their next refresh (a drained server gets no new work).
CHANGES_CHANNEL = "sy:servers:changed"

# KEYS[1] server hash; ARGV: state, now. 1: the server is now in that state; 0: not
# registered, or draining and asked to go back to work.
_SET_STATE = """
local current = redis.call('HGET', KEYS[1], 'state')
if not current then return 0 end
if current == ARGV[1] then return 1 end
if current == 'draining' and ARGV[1] ~= 'dead' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'state_since', ARGV[2])
return 1
"""
# KEYS[1] server hash; ARGV: now, the state its supervisor knows ('' for none), dead_after_s.
# A heartbeat never brings a deregistered server back. 2: readers must hear of it, because it
# put back a state that differed (never over a drain request), or because the server had read
# as dead (its last heartbeat older than dead_after_s: a supervisor or Redis away for a while).
_HEARTBEAT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local last = tonumber(redis.call('HGET', KEYS[1], 'heartbeat_at') or '0') or 0
redis.call('HSET', KEYS[1], 'heartbeat_at', ARGV[1])
local announce = tonumber(ARGV[1]) - last > tonumber(ARGV[3])
if ARGV[2] ~= '' then
  local current = redis.call('HGET', KEYS[1], 'state')
  if current ~= ARGV[2] and current ~= 'draining' then
    redis.call('HSET', KEYS[1], 'state', ARGV[2], 'state_since', ARGV[1])
    announce = true
  end
end
if announce then return 2 end
return 1
"""


def server_key(server_id: str) -> str:
    return f"sy:server:{server_id}"


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """One registered server, as a reader sees it (state already aged by the heartbeat)."""

    server_id: str
    pool_id: str
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    gpus: tuple[int, ...]  # device indices it was given; () on the CPU engine
    state: ServerState
    started_at: float  # Unix time its process started
    heartbeat_at: float  # Unix time its supervisor last found it alive
    state_since: float | None = None  # Unix time of the last state change
    pid: int | None = None  # the server's process: SIGTERM to it drains the server

    @property
    def grpc_url(self) -> str:
        """host:port, the form `tritonclient.grpc` takes."""
        return f"{self.host}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def health_url(self) -> str:
        return f"{self.http_url}/v2/health/ready"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"


class ServerRegistry:
    """Reads and writes `ServerInfo` records in Redis. Every `now` is Unix time (seconds)."""

    def __init__(self, client: redis.asyncio.Redis, dead_after_s: float = 2.0) -> None:
        if dead_after_s <= 0:
            raise ValueError(f"dead_after_s must be positive, got {dead_after_s}")
        self._redis = client
        self.dead_after_s = dead_after_s
        self._set_state = client.register_script(_SET_STATE)
        self._heartbeat = client.register_script(_HEARTBEAT)

    async def register(self, info: ServerInfo) -> None:
        """Add (or replace: a restarted server keeps its id) a server's record."""
        key = server_key(info.server_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.hset(key, mapping=_encode(info))
            pipe.sadd(SERVERS_KEY, info.server_id)
            pipe.publish(CHANGES_CHANNEL, info.server_id)
            await pipe.execute()

    async def heartbeat(self, server_id: str, now: float, state: ServerState | None = None) -> bool:
        """Record that the server was seen alive at `now`; False when it is not registered.

        `state`: the state its supervisor knows it is in. A stored state that differs is put
        back (and announced), unless the server was asked to drain: a state change a Redis
        failover lost (replication is asynchronous, docs/redis.md) would otherwise stay lost,
        as a server left STARTING for good that no gateway would route to.

        A heartbeat that follows a silence longer than `dead_after_s` is announced too: readers
        that read the server as dead meanwhile (its supervisor restarting, Redis failing over)
        route to it again at once, not at their next full read of the registry (30 s later:
        the chaos run's failover-redis fault left pools looking full that long)."""
        args = [repr(now), "" if state is None else state.value, repr(self.dead_after_s)]
        beat = await self._heartbeat(keys=[server_key(server_id)], args=args)
        if beat == 2:
            await self._redis.publish(CHANGES_CHANNEL, server_id)
        return bool(beat)

    async def set_state(self, server_id: str, state: ServerState, now: float) -> bool:
        """Move the server to `state`; False when it is not registered, or when it is draining
        and `state` is not DEAD (a drain is never undone)."""
        changed = bool(await self._set_state(keys=[server_key(server_id)], args=[state.value, repr(now)]))
        if changed:
            await self._redis.publish(CHANGES_CHANNEL, server_id)
        return changed

    async def request_drain(self, server_id: str, now: float | None = None) -> bool:
        """Ask the server's supervisor to drain it: it takes no new work, finishes what it has,
        then stops and is deregistered. False when no such server is registered."""
        return await self.set_state(server_id, ServerState.DRAINING, time.time() if now is None else now)

    async def deregister(self, server_id: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(server_key(server_id))
            pipe.srem(SERVERS_KEY, server_id)
            pipe.publish(CHANGES_CHANNEL, server_id)
            await pipe.execute()

    async def changes(self) -> redis.asyncio.client.PubSub:
        """A subscription to `CHANGES_CHANNEL` (the caller closes it)."""
        pubsub = self._redis.pubsub()
        await pubsub.subscribe(CHANGES_CHANNEL)
        return pubsub

    async def get(self, server_id: str, now: float | None = None) -> ServerInfo | None:
        raw = await self._redis.hgetall(server_key(server_id))
        return self._aged(_decode(raw), time.time() if now is None else now) if raw else None

    async def servers(self, pool_id: str | None = None, *, now: float | None = None) -> list[ServerInfo]:
        """Every registered server (of `pool_id`, when given), sorted by id; a server whose
        heartbeat is older than `dead_after_s` at `now` (default: the clock) reads as DEAD."""
        now = time.time() if now is None else now
        ids = sorted(_text(member) for member in await self._redis.smembers(SERVERS_KEY))
        if not ids:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for server_id in ids:
                pipe.hgetall(server_key(server_id))
            records = await pipe.execute()
        found = [_decode(raw) for raw in records if raw]  # a hash deleted since SMEMBERS: gone
        return [self._aged(info, now) for info in found if pool_id is None or info.pool_id == pool_id]

    def _aged(self, info: ServerInfo, now: float) -> ServerInfo:
        if info.state is not ServerState.DEAD and now - info.heartbeat_at > self.dead_after_s:
            return replace(info, state=ServerState.DEAD)
        return info


def _encode(info: ServerInfo) -> dict[Any, Any]:
    return {
        "server_id": info.server_id,
        "pool_id": info.pool_id,
        "host": info.host,
        "http_port": str(info.http_port),
        "grpc_port": str(info.grpc_port),
        "metrics_port": str(info.metrics_port),
        "gpus": ",".join(str(gpu) for gpu in info.gpus),
        "state": info.state.value,
        "started_at": repr(info.started_at),
        "heartbeat_at": repr(info.heartbeat_at),
        "state_since": repr(info.started_at if info.state_since is None else info.state_since),
        "pid": "" if info.pid is None else str(info.pid),
    }


def _decode(raw: dict[Any, Any]) -> ServerInfo:
    fields = {_text(k): _text(v) for k, v in raw.items()}
    return ServerInfo(
        server_id=fields["server_id"],
        pool_id=fields["pool_id"],
        host=fields["host"],
        http_port=int(fields["http_port"]),
        grpc_port=int(fields["grpc_port"]),
        metrics_port=int(fields["metrics_port"]),
        gpus=tuple(int(gpu) for gpu in fields["gpus"].split(",") if gpu),
        state=ServerState(fields["state"]),
        started_at=float(fields["started_at"]),
        heartbeat_at=float(fields["heartbeat_at"]),
        state_since=float(fields["state_since"]) if fields.get("state_since") else None,
        pid=int(fields["pid"]) if fields.get("pid") else None,
    )


def _text(value: bytes | str) -> str:
    """Clients may or may not decode responses."""
    return value.decode() if isinstance(value, bytes) else value
