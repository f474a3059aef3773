"""A caller-made `request_id` names one generation, never two, across every gateway process.

Redis holds, per team and request id (kept 24 h):

    sy:req:{team}:{id}          hash   fingerprint, state (running|done), result (JSON)
    sy:req:{team}:{id}:deltas   stream every delta as it was sent, then one `final` entry

    claim()  ──NEW──────▶ this process generates; record_delta()/record_final() as it goes
             ──RUNNING──▶ attach: read the deltas stream from the start, then follow it live
             ──DONE─────▶ the stored result (the deltas stream replays the same text)
             ──CONFLICT─▶ 409: the same id with a different body

The claim is one Lua script, so two gateways that receive the same id at the same moment
cannot both generate. A generation whose owner died stays `running` until its record expires:
a repeat then attaches to a stream that never ends, so attaching readers give up after
`attach_idle_timeout_s` without a new entry and report the request as failed.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

RESULT_TTL_S = 24 * 3600

_CLAIM = """
local existing = redis.call('HGET', KEYS[1], 'fingerprint')
if not existing then
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'state', 'running')
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  return {'new', ''}
end
if existing ~= ARGV[1] then
  return {'conflict', ''}
end
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'done' then
  return {'done', redis.call('HGET', KEYS[1], 'result') or ''}
end
return {'running', ''}
"""


class ClaimState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    DONE = "done"
    CONFLICT = "conflict"


@dataclass(frozen=True, slots=True)
class Claim:
    state: ClaimState
    result: dict[str, Any] | None = None  # the stored final result when DONE


@dataclass(frozen=True, slots=True)
class StoredDelta:
    """One entry of a request's deltas stream: text and tokens, or the final result."""

    text: str = ""
    token_ids: tuple[int, ...] = ()
    final: dict[str, Any] | None = None


def fingerprint(body: dict[str, Any]) -> str:
    """A stable digest of what was asked: the same id with another body is a conflict."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class IdempotencyStore:
    """Claims, records and replays generations by (team, request id)."""

    def __init__(self, client: aioredis.Redis, *, ttl_s: int = RESULT_TTL_S) -> None:
        self._redis = client
        self._ttl_s = ttl_s
        self._claim = client.register_script(_CLAIM)
        # `follow` blocks on XREAD in slices shorter than the client's socket timeout (2 s in
        # the gateway), which would otherwise cut a longer wait short with a redis TimeoutError.
        socket_timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
        self._block_slice_s: float | None = socket_timeout / 2 if socket_timeout else None

    @staticmethod
    def _key(team_id: str, request_id: str) -> str:
        return f"sy:req:{team_id}:{request_id}"

    async def claim(self, team_id: str, request_id: str, digest: str) -> Claim:
        state, result = await self._claim(keys=[self._key(team_id, request_id)], args=[digest, self._ttl_s])
        claim_state = ClaimState(_text(state))
        stored = json.loads(_text(result)) if claim_state is ClaimState.DONE and result else None
        return Claim(claim_state, stored)

    async def state(self, team_id: str, request_id: str) -> ClaimState | None:
        """RUNNING or DONE for a known request, None for an unknown one (claims nothing)."""
        state = await self._redis.hget(self._key(team_id, request_id), "state")
        if state is None:
            return None
        return ClaimState.DONE if _text(state) == "done" else ClaimState.RUNNING

    async def record_delta(self, team_id: str, request_id: str, text: str, token_ids: tuple[int, ...]) -> None:
        stream = self._key(team_id, request_id) + ":deltas"
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.xadd(stream, {"text": text, "token_ids": json.dumps(list(token_ids))})
            pipe.expire(stream, self._ttl_s)
            await pipe.execute()

    async def record_final(self, team_id: str, request_id: str, result: dict[str, Any]) -> None:
        """Store the final result and end the deltas stream (readers stop there)."""
        key = self._key(team_id, request_id)
        encoded = json.dumps(result, separators=(",", ":"))
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"state": "done", "result": encoded})
            pipe.expire(key, self._ttl_s)
            pipe.xadd(key + ":deltas", {"final": encoded})
            pipe.expire(key + ":deltas", self._ttl_s)
            await pipe.execute()

    async def forget(self, team_id: str, request_id: str) -> None:
        """Drop a claim whose generation never started (it was refused), so a retry may run."""
        key = self._key(team_id, request_id)
        await self._redis.delete(key, key + ":deltas")

    async def follow(
        self, team_id: str, request_id: str, *, idle_timeout_s: float = 30.0
    ) -> AsyncIterator[StoredDelta]:
        """Every delta from the start, then live ones, until the final entry.

        Raises TimeoutError when nothing new arrives for `idle_timeout_s` (the owner died)."""
        stream = self._key(team_id, request_id) + ":deltas"
        last_id = "0-0"
        loop = asyncio.get_running_loop()
        idle_until = loop.time() + idle_timeout_s
        while (remaining := idle_until - loop.time()) > 0:
            wait_s = remaining if self._block_slice_s is None else min(remaining, self._block_slice_s)
            # [(stream, [(entry_id, fields), ...])]; redis-py's type for it is a loose union.
            batch: Any = await self._redis.xread({stream: last_id}, block=max(1, int(wait_s * 1000)), count=256)
            if not batch:
                continue
            idle_until = loop.time() + idle_timeout_s
            for entry_id, fields in batch[0][1]:
                last_id = _text(entry_id)
                decoded = {_text(k): _text(v) for k, v in fields.items()}
                if "final" in decoded:
                    yield StoredDelta(final=json.loads(decoded["final"]))
                    return
                yield StoredDelta(decoded.get("text", ""), tuple(json.loads(decoded.get("token_ids", "[]"))))
        raise TimeoutError(f"request {request_id!r}: no progress for {idle_timeout_s:.0f} s")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
