"""The interactive rates the autoscaler has seen, kept in Redis so its load profile outlives a
restart, and a way to teach it a load it has not seen yet (a rehearsal of a ramp).

    sy:pool:{pool}:rates          ZSET  "t:rate" scored by t: every pass's observation, kept
                                        for `keep_s` (the profile's weeks)
    sy:pool:{pool}:rates:taught   LIST  "t:rate" waiting to be recorded by the next pass

At start the service replays the stored rates into each pool's `LoadProfile`, oldest first,
so the time-of-day and weekday shape it learnt is there from the first decision. `teach`
queues observations for a running autoscaler: `switchyard load --rehearse` queues the ramp it
is about to run as if it had run a day earlier, so the profile expects it (docs/autoscaler.md).
Taught points are stored with the observed ones, so a restart keeps them too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis.asyncio

from autoscaler.load_profile import WEEK_S

RatePoint = tuple[float, float]  # (Unix time, interactive req/s)


def rates_key(pool_id: str) -> str:
    return f"sy:pool:{pool_id}:rates"


def taught_key(pool_id: str) -> str:
    return f"sy:pool:{pool_id}:rates:taught"


class RateHistory:
    def __init__(self, client: redis.asyncio.Redis, keep_s: float = 4 * WEEK_S) -> None:
        if keep_s <= 0:
            raise ValueError(f"keep_s must be positive, got {keep_s}")
        self._redis = client
        self._keep_s = keep_s

    async def append(self, pool_id: str, points: Iterable[RatePoint], now: float) -> None:
        """Store observations; what is older than `keep_s` before `now` goes."""
        members: dict[Any, Any] = {_encode(t, rate): t for t, rate in points}
        async with self._redis.pipeline(transaction=False) as pipe:
            if members:
                pipe.zadd(rates_key(pool_id), members)
            pipe.zremrangebyscore(rates_key(pool_id), "-inf", f"({now - self._keep_s!r}")
            await pipe.execute()

    async def load(self, pool_id: str, now: float) -> list[RatePoint]:
        """The stored observations of the last `keep_s`, oldest first."""
        raw: list[Any] = await self._redis.zrangebyscore(rates_key(pool_id), now - self._keep_s, "+inf")
        return sorted(_decode(member) for member in raw)

    async def teach(self, pool_id: str, points: Iterable[RatePoint]) -> int:
        """Queue observations for the running autoscaler's next pass; returns how many."""
        encoded = [_encode(t, rate) for t, rate in points]
        if encoded:
            await self._redis.rpush(taught_key(pool_id), *encoded)
        return len(encoded)

    async def take_taught(self, pool_id: str) -> list[RatePoint]:
        """What `teach` queued, oldest first; the queue is emptied."""
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.lrange(taught_key(pool_id), 0, -1)
            pipe.delete(taught_key(pool_id))
            raw, _ = await pipe.execute()
        return sorted(_decode(member) for member in raw)


def _encode(t: float, rate: float) -> str:
    if rate < 0:
        raise ValueError(f"a rate cannot be negative, got {rate}")
    return f"{t!r}:{rate!r}"


def _decode(member: bytes | str) -> RatePoint:
    text = member.decode() if isinstance(member, bytes) else member
    t, rate = text.split(":")
    return float(t), float(rate)
