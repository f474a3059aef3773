"""TensorRT-LLM's per-iteration runtime stats as an `EngineStats` snapshot.

The upstream llmapi Triton model exports no `nv_trt_llm_*` metrics; the C++ backend did, from
the same executor stats this reads (`LLM.get_stats_async`, one record per engine iteration):

    kvCacheStats.maxNumBlocks / freeNumBlocks / usedNumBlocks / tokensPerBlock / reusedBlocks
    numActiveRequests, maxNumActiveRequests, numQueuedRequests
    inflightBatchingStats.numScheduledRequests / numContextRequests

Records come only from iterations, and an idle engine runs none: its last record still shows
the work it just finished. So the loop's own count of requests in the LLM bounds the request
figures (flex and bulk it holds back count as waiting), and with nothing unfinished no block is in use
(finished requests' blocks are free or cached-and-evictable, which the executor counts as free).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.stats import EngineStats


@dataclass(frozen=True, slots=True)
class RequestCounts:
    """What the engine loop itself knows: requests submitted and not yet finished, by class."""

    priority: int = 0
    interactive: int = 0
    flex: int = 0
    bulk: int = 0
    held: int = 0  # of those, flex and bulk requests the loop has not given to the LLM yet

    @property
    def unfinished(self) -> int:
        return self.priority + self.interactive + self.flex + self.bulk

    @property
    def in_llm(self) -> int:
        return self.unfinished - self.held


def parse_stats_record(record: str | Mapping[str, Any]) -> Mapping[str, Any]:
    """One record of `get_stats_async` (JSON text in some releases, a dict in others)."""
    parsed = json.loads(record) if isinstance(record, str) else record
    if not isinstance(parsed, Mapping):
        raise ValueError(f"runtime stats record is not an object: {record!r:.200}")
    return parsed


def engine_stats(record: Mapping[str, Any] | None, counts: RequestCounts, fallback: EngineStats) -> EngineStats:
    """The snapshot to publish: `record`'s figures (or `fallback`'s before any record came),
    bounded by what the loop knows is unfinished."""
    kv = _mapping(record, "kvCacheStats")
    batching = _mapping(record, "inflightBatchingStats")
    max_blocks = _int(kv, "maxNumBlocks", fallback.max_blocks)
    used = _int(kv, "usedNumBlocks", fallback.used_blocks) if counts.unfinished else 0
    free = _int(kv, "freeNumBlocks", fallback.free_blocks) if counts.unfinished else max_blocks
    active = min(_int(record, "numActiveRequests", fallback.active_requests), counts.in_llm)
    queued = min(_int(record, "numQueuedRequests", fallback.waiting_requests), counts.in_llm - active)
    scheduled = min(_int(batching, "numScheduledRequests", fallback.scheduled_requests), active)
    return EngineStats(
        max_blocks=max_blocks,
        free_blocks=free,
        used_blocks=used,
        tokens_per_block=_int(kv, "tokensPerBlock", fallback.tokens_per_block),
        reused_blocks=_int(kv, "reusedBlocks", fallback.reused_blocks),
        active_requests=active,
        max_requests=_int(record, "maxNumActiveRequests", fallback.max_requests),
        scheduled_requests=scheduled,
        context_requests=min(_int(batching, "numContextRequests", fallback.context_requests), scheduled),
        waiting_requests=queued + counts.held,
        priority_requests=counts.priority,
        interactive_requests=counts.interactive,
        flex_requests=counts.flex,
        bulk_requests=counts.bulk,
    )


def _mapping(record: Mapping[str, Any] | None, key: str) -> Mapping[str, Any] | None:
    if record is None:
        return None
    value = record.get(key)
    return value if isinstance(value, Mapping) else None


def _int(record: Mapping[str, Any] | None, key: str, default: int) -> int:
    if record is None:
        return default
    value = record.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
