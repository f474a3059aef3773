"""The fleet's servers in Redis: who runs where, in which state, last seen when.

    sy:servers            SET   of server ids
    sy:server:{id}        HASH  server_id pool_id host http_port grpc_port metrics_port gpus
                                state state_since started_at heartbeat_at pid epoch
    sy:epoch:{id}         STRING the newest registration's epoch (fleet_state/epochs.py)

Supervisors write (register, heartbeat every ~0.5 s, set_state, deregister); gateways read
`servers(pool_id)` and route only to READY ones; `switchyard drain` asks for a drain by
setting the state to DRAINING, which the server's supervisor sees and acts on.

A heartbeat older than `dead_after_s` reads as DEAD whatever the stored state says: a
supervisor that died cannot mark its servers dead, so readers must not trust them. Drain is
one way: a DRAINING server may only become DEAD (or be deregistered), never READY again, so a
supervisor that raced a drain request cannot undo it.

Every registration gets a new epoch; heartbeats, state changes and deregistrations that carry
an older one raise `Fenced` and change nothing (fleet_state/epochs.py): a server replaced
while it was only unreachable cannot keep its old record alive or take it back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import redis.asyncio

from fleet_state.epochs import FENCE_CHECK, Fenced, epoch_key
from fleet_state.server_state import ServerState

SERVERS_KEY = "sy:servers"
# A server id is published here when it joins, leaves or changes state: gateways re-read the
# registry at once instead of at their next refresh (a drained server gets no new work).
CHANGES_CHANNEL = "sy:servers:changed"

# KEYS[1] server hash, KEYS[2] the servers set, KEYS[3] epoch counter; ARGV: the epoch ('': a
# new one), the server id, the changes channel, then the record's fields and values. The
# epoch written; -1: a newer registration holds the id.
_REGISTER = (
    FENCE_CHECK
    + """
local epoch
if ARGV[1] == '' then
  epoch = redis.call('INCR', KEYS[3])
else
  if fenced(KEYS[3], ARGV[1]) then return -1 end
  epoch = tonumber(ARGV[1])
  redis.call('SET', KEYS[3], epoch)
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'epoch', epoch, unpack(ARGV, 4))
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return epoch
"""
)
# KEYS[1] server hash, KEYS[2] the servers set, KEYS[3] epoch counter; ARGV: epoch, server id,
# channel. 1 deregistered; -1 fenced (the record is a newer registration's: left alone).
_DEREGISTER = (
    FENCE_CHECK
    + """
if fenced(KEYS[3], ARGV[1]) then return -1 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return 1
"""
)
# KEYS[1] server hash, KEYS[2] epoch counter; ARGV: state, now, epoch. 1: the server is now in
# that state; 0: not registered, or draining and asked to go back to work; -1: fenced.
_SET_STATE = (
    FENCE_CHECK
    + """
if fenced(KEYS[2], ARGV[3]) then return -1 end
local current = redis.call('HGET', KEYS[1], 'state')
if not current then return 0 end
if current == ARGV[1] then return 1 end
if current == 'draining' and ARGV[1] ~= 'dead' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'state_since', ARGV[2])
return 1
"""
)
# KEYS[1] server hash, KEYS[2] epoch counter; ARGV: now, the state its supervisor knows ('' for
# none), dead_after_s, epoch. A heartbeat never brings a deregistered server back. 2: readers
# must hear of it, because it put back a state that differed (never over a drain request), or
# because the server had read as dead (its last heartbeat older than dead_after_s: a
# supervisor or Redis away for a while). -1: fenced.
_HEARTBEAT = (
    FENCE_CHECK
    + """
if fenced(KEYS[2], ARGV[4]) then return -1 end
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
)


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
    epoch: int | None = None  # its registration (fleet_state/epochs.py); None: none yet

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
        self._register = client.register_script(_REGISTER)
        self._deregister = client.register_script(_DEREGISTER)
        self._set_state = client.register_script(_SET_STATE)
        self._heartbeat = client.register_script(_HEARTBEAT)

    async def next_epoch(self, server_id: str) -> int:
        """A new epoch for a registration to come (a supervisor gives it to the process it
        launches before registering it)."""
        return int(await self._redis.incr(epoch_key(server_id)))

    async def register(self, info: ServerInfo) -> int:
        """Add (or replace: a restarted server keeps its id) a server's record; its epoch.
        `info.epoch` None: a new epoch; else that one (from `next_epoch`, or a re-registration
        after Redis lost the record), unless a newer registration holds the id: Fenced."""
        fields = [word for pair in _encode(info).items() for word in pair]
        keys = [server_key(info.server_id), SERVERS_KEY, epoch_key(info.server_id)]
        mine = "" if info.epoch is None else str(info.epoch)
        epoch = int(await self._register(keys=keys, args=[mine, info.server_id, CHANGES_CHANNEL, *fields]))
        if epoch < 0:
            raise Fenced(info.server_id, info.epoch or 0)
        return epoch

    async def heartbeat(
        self, server_id: str, now: float, state: ServerState | None = None, *, epoch: int | None = None
    ) -> bool:
        """Record that the server was seen alive at `now`; False when it is not registered.

        `state`: the state its supervisor knows it is in. A stored state that differs is put
        back (and announced), unless the server was asked to drain: a state change a Redis
        failover lost (replication is asynchronous, docs/redis.md) would otherwise stay lost,
        as a server left STARTING for good that no gateway would route to.

        A heartbeat that follows a silence longer than `dead_after_s` is announced too: readers
        that read the server as dead meanwhile (its supervisor restarting, Redis failing over)
        route to it again at once, not at their next full read of the registry (30 s later:
        the chaos run's failover-redis fault left pools looking full that long).

        `epoch`: the registration it beats for; Fenced when a newer one holds the id."""
        args = [repr(now), "" if state is None else state.value, repr(self.dead_after_s), _word(epoch)]
        beat = await self._heartbeat(keys=[server_key(server_id), epoch_key(server_id)], args=args)
        if beat == -1:
            raise Fenced(server_id, epoch or 0)
        if beat == 2:
            await self._redis.publish(CHANGES_CHANNEL, server_id)
        return bool(beat)

    async def set_state(self, server_id: str, state: ServerState, now: float, *, epoch: int | None = None) -> bool:
        """Move the server to `state`; False when it is not registered, or when it is draining
        and `state` is not DEAD (a drain is never undone). Fenced when `epoch` is older than
        the id's newest registration (None: unfenced, as an operator's drain request is)."""
        keys = [server_key(server_id), epoch_key(server_id)]
        result = int(await self._set_state(keys=keys, args=[state.value, repr(now), _word(epoch)]))
        if result == -1:
            raise Fenced(server_id, epoch or 0)
        changed = result == 1
        if changed:
            await self._redis.publish(CHANGES_CHANNEL, server_id)
        return changed

    async def request_drain(self, server_id: str, now: float | None = None) -> bool:
        """Ask the server's supervisor to drain it: it takes no new work, finishes what it has,
        then stops and is deregistered. False when no such server is registered."""
        return await self.set_state(server_id, ServerState.DRAINING, time.time() if now is None else now)

    async def deregister(self, server_id: str, *, epoch: int | None = None) -> None:
        """Remove the server's record; Fenced (and nothing removed) when it is a newer
        registration's than `epoch`."""
        keys = [server_key(server_id), SERVERS_KEY, epoch_key(server_id)]
        if int(await self._deregister(keys=keys, args=[_word(epoch), server_id, CHANGES_CHANNEL])) == -1:
            raise Fenced(server_id, epoch or 0)

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
        epoch=int(fields["epoch"]) if fields.get("epoch") else None,
    )


def _word(epoch: int | None) -> str:
    """An epoch as a script argument: '' for an unfenced write."""
    return "" if epoch is None else str(epoch)


def _text(value: bytes | str) -> str:
    """Clients may or may not decode responses."""
    return value.decode() if isinstance(value, bytes) else value
