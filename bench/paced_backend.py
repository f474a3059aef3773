"""A generation backend that streams tokens without computing them, at a set pace.

Benchmarks of the gateway alone (bench_edge, bench_concurrency) put it under the real app in
place of Triton: every request gets `max_tokens` one-token deltas ("x ", token id 5), the first
after `Pace.first_s`, each next after a gap drawn from `Pace.gap_s`. No KV, no engine: what
is measured is the gateway's own work per open stream and per event.

    Pace(first_s=0.005, gap_s=(0.005, 0.005))   bench_edge: a token every 5 ms
    Pace(first_s=0.0,   gap_s=(1.0, 2.0))       bench_concurrency: thousands of slow, open
                                                streams, each an event every 1-2 s (jittered,
                                                so they do not all wake at once)
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass

from contracts.generation import GenerationDelta, GenerationRequest, PoolReadiness

TOKEN_TEXT = "x "
TOKEN_ID = 5


@dataclass(frozen=True, slots=True)
class Pace:
    """When a reply's tokens come: the first `first_s` after the request, then one every
    `gap_s[0]`..`gap_s[1]` seconds (uniform)."""

    first_s: float
    gap_s: tuple[float, float]

    def __post_init__(self) -> None:
        if self.first_s < 0 or not 0 <= self.gap_s[0] <= self.gap_s[1]:
            raise ValueError(f"need first_s ≥ 0 and 0 ≤ gap_s[0] ≤ gap_s[1], got {self.first_s}, {self.gap_s}")


class PacedBackend:
    """Streams `max_tokens` one-token deltas per request at `pace`; every pool in `pools`
    (pool id → model id) reads as ready. `seed` fixes the jitter."""

    def __init__(self, pace: Pace, pools: dict[str, str], seed: int = 0) -> None:
        self.pace = pace
        self._pools = dict(pools)
        self._rng = random.Random(seed)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        low, high = self.pace.gap_s
        for index in range(request.max_tokens):
            await asyncio.sleep(self.pace.first_s if index == 0 else self._rng.uniform(low, high))
            last = index == request.max_tokens - 1
            yield GenerationDelta(TOKEN_TEXT, (TOKEN_ID,), "length" if last else None)

    async def cancel(self, request_id: str) -> bool:
        return False

    async def readiness(self) -> list[PoolReadiness]:
        return [PoolReadiness(pool_id, model_id, True) for pool_id, model_id in self._pools.items()]

    async def close(self) -> None:
        return None
