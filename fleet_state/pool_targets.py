"""Each pool's latest target, with its reasons, in Redis: what `switchyard servers` prints beside
the servers the pool actually runs, and what an operator reads to know why.

    sy:pool:{pool}:target   HASH  target current ready starting draining reasons (JSON list)
                                  decided_at actuator      expires after `ttl_s`

The record expires a few intervals after the autoscaler's last pass, so a stopped autoscaler
leaves no stale target behind for `switchyard servers` to show.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis.asyncio


def target_key(pool_id: str) -> str:
    return f"sy:pool:{pool_id}:target"


@dataclass(frozen=True, slots=True)
class PoolTarget:
    """One pool's decision as stored: the target and the counts it was decided on."""

    pool_id: str
    target: int
    ready: int
    starting: int
    draining: int
    reasons: tuple[str, ...]
    decided_at: float
    actuator: str


class PoolTargetStore:
    def __init__(self, client: redis.asyncio.Redis, ttl_s: float = 60.0) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        self._redis = client
        self._ttl_ms = int(ttl_s * 1000)

    async def write(self, target: PoolTarget) -> None:
        key = target_key(target.pool_id)
        fields: dict[Any, Any] = {
            "target": target.target,
            "ready": target.ready,
            "starting": target.starting,
            "draining": target.draining,
            "reasons": json.dumps(list(target.reasons)),
            "decided_at": repr(target.decided_at),
            "actuator": target.actuator,
        }
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=fields)
            pipe.pexpire(key, self._ttl_ms)
            await pipe.execute()

    async def read(self, pool_ids: Iterable[str]) -> dict[str, PoolTarget]:
        """The stored targets of `pool_ids` (pools without a live autoscaler are absent)."""
        ids = list(pool_ids)
        async with self._redis.pipeline(transaction=False) as pipe:
            for pool_id in ids:
                pipe.hgetall(target_key(pool_id))
            records: list[dict[Any, Any]] = await pipe.execute()
        return {pool_id: _decode(pool_id, raw) for pool_id, raw in zip(ids, records, strict=True) if raw}


def _decode(pool_id: str, raw: dict[Any, Any]) -> PoolTarget:
    values = {_text(k): _text(v) for k, v in raw.items()}
    return PoolTarget(
        pool_id=pool_id,
        target=int(values["target"]),
        ready=int(values["ready"]),
        starting=int(values["starting"]),
        draining=int(values["draining"]),
        reasons=tuple(json.loads(values.get("reasons", "[]"))),
        decided_at=float(values["decided_at"]),
        actuator=values.get("actuator", ""),
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
