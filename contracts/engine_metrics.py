"""The engine's metrics as the router, admission, the supervisor and the autoscaler read them:
one server's Prometheus text parsed into KV tokens, request counts and the heartbeat.

The names and what they mean are in contracts/metric_names.py (the engine hosts export them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from contracts.metric_names import (
    CLASS_METRIC,
    HEARTBEAT_METRIC,
    KV_CACHE_BLOCK_METRIC,
    KV_CLASS_METRIC,
    REQUEST_METRIC,
)
from contracts.service_tier import INTERACTIVE_SHAPED, PREEMPTS

# The classes whose KV people's requests (priority, interactive) may take: flex and bulk.
_PREEMPTIBLE_KV = PREEMPTS["priority"] | PREEMPTS["interactive"]


@dataclass(frozen=True, slots=True)
class KvCache:
    """One server's KV cache in tokens. `free` counts cached blocks nobody holds (evictable)."""

    capacity_tokens: int
    free_tokens: int
    # People's requests in the engine now, admitted or waiting (`switchyard_engine_requests` of
    # the interactive-shaped classes: priority, interactive and flex).
    interactive_requests: int = 0
    # Held by admitted bulk in an engine that preempts it for people (`switchyard_engine_kv_blocks`;
    # 0 where the engine exports none, as TensorRT-LLM does).
    bulk_tokens: int = 0
    flex_tokens: int = 0  # the same, held by admitted flex (preempted by priority and interactive)

    @property
    def preemptible_tokens(self) -> int:
        """KV a priority or interactive request may take by preemption: flex's and bulk's."""
        return self.bulk_tokens + self.flex_tokens


# The families these parsers read. A server's /metrics text is mostly Triton's own per-model
# inference metrics: parsing only these lines made a server's 10 Hz load publisher cost ~4 %
# of a core instead of ~10 % (prometheus-client's parser is pure Python), and a health read
# parses them once for both its parts.
_FAMILIES = (KV_CACHE_BLOCK_METRIC, REQUEST_METRIC, CLASS_METRIC, KV_CLASS_METRIC, HEARTBEAT_METRIC)
_SAMPLE_PREFIXES = tuple(f"{name}{end}" for name in _FAMILIES for end in ("{", " "))


def _engine_samples(metrics_text: str) -> list[Sample]:
    """The samples of the engine families in `metrics_text`: only their sample lines are
    parsed (comments and every other family dropped; the parser reads samples as they are)."""
    lines = "\n".join(line for line in metrics_text.splitlines() if line.startswith(_SAMPLE_PREFIXES))
    return [sample for family in text_string_to_metric_families(lines + "\n") for sample in family.samples]


def parse_kv_cache(metrics_text: str) -> KvCache:
    """The KV capacity, free tokens and tokens held by bulk and by flex, and the people's
    requests in the engine, in one server's Prometheus metrics text."""
    return _kv_cache(_engine_samples(metrics_text))


def _kv_cache(samples: list[Sample]) -> KvCache:
    per_engine: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
    interactive = 0

    def engine_of(labels: dict[str, str], own: str) -> dict[str, float]:
        return per_engine.setdefault(tuple(sorted((k, v) for k, v in labels.items() if k != own)), {})

    for sample in samples:
        if sample.name == CLASS_METRIC and sample.labels.get("request_class") in INTERACTIVE_SHAPED:
            interactive += int(sample.value)
        elif sample.name == KV_CLASS_METRIC and sample.labels.get("request_class") in _PREEMPTIBLE_KV:
            engine_of(sample.labels, "request_class")[sample.labels["request_class"]] = sample.value
        elif sample.name == KV_CACHE_BLOCK_METRIC and "kv_cache_block_type" in sample.labels:
            engine_of(sample.labels, "kv_cache_block_type")[sample.labels["kv_cache_block_type"]] = sample.value
    capacity = free = bulk = flex = 0
    for blocks in per_engine.values():
        tokens_per = int(blocks.get("tokens_per", 0))
        capacity += int(blocks.get("max", 0)) * tokens_per
        free += int(blocks.get("free", 0)) * tokens_per
        bulk += int(blocks.get("bulk", 0)) * tokens_per
        flex += int(blocks.get("flex", 0)) * tokens_per
    return KvCache(capacity, free, interactive, bulk, flex)


def parse_kv_capacity(metrics_text: str) -> int:
    """Max blocks × tokens per block: the KV tokens one server holds (0 when it exports none)."""
    return parse_kv_cache(metrics_text).capacity_tokens


@dataclass(frozen=True, slots=True)
class EngineHealth:
    """What one server's metrics say about its engine(s)."""

    heartbeat: float | None  # the oldest engine's heartbeat (None: no engine exports one yet)
    capacity_tokens: int
    free_tokens: int
    active: int  # requests admitted in the engines
    waiting: int  # requests queued for admission
    bulk_tokens: int = 0  # KV held by bulk that people's requests may preempt (KvCache.bulk_tokens)
    interactive_requests: int = 0  # people's, in the engines, admitted or waiting (as KvCache's)
    flex_tokens: int = 0  # KV held by flex that priority and interactive may preempt

    @property
    def preemptible_tokens(self) -> int:
        """KV a priority or interactive request may take by preemption: flex's and bulk's."""
        return self.bulk_tokens + self.flex_tokens

    @property
    def in_flight(self) -> int:
        """Requests the server still owes a reply: a drain waits for this to reach 0."""
        return self.active + self.waiting

    @property
    def used_fraction(self) -> float | None:
        """Share of the KV cache in use (None when the server exports no KV gauge)."""
        if self.capacity_tokens <= 0:
            return None
        return 1.0 - self.free_tokens / self.capacity_tokens


def parse_engine_health(metrics_text: str) -> EngineHealth:
    """The heartbeat, KV tokens and request counts in one server's Prometheus text.

    With several engine models on one server the counts are summed and the heartbeat is the
    oldest one: a server whose one stub died cannot serve the model that uses it.
    """
    samples = _engine_samples(metrics_text)
    heartbeats: list[float] = []
    active = waiting = 0
    for sample in samples:
        if sample.name == HEARTBEAT_METRIC and math.isfinite(sample.value):
            heartbeats.append(sample.value)
        elif sample.name == REQUEST_METRIC:
            kind = sample.labels.get("request_type")
            if kind == "active":
                active += int(sample.value)
            elif kind == "waiting":
                waiting += int(sample.value)
    kv = _kv_cache(samples)
    return EngineHealth(
        min(heartbeats, default=None),
        kv.capacity_tokens,
        kv.free_tokens,
        active,
        waiting,
        kv.bulk_tokens,
        kv.interactive_requests,
        kv.flex_tokens,
    )
