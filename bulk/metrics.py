"""The dispatcher's Prometheus metrics (served on `bulk.metrics_port`): what it releases, how
entries end, the room it sees, and the backlog per team, with batches at risk of their deadline."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class DispatcherMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.released = Counter(
            "switchyard_bulk_released",
            "Batch entries sent to the gateway (attempts included).",
            ["pool", "team"],
            registry=self.registry,
        )
        self.entries = Counter(
            "switchyard_bulk_entries",
            "Batch entries that ended, by outcome (done, failed, expired), as this dispatcher recorded them.",
            ["team", "outcome"],
            registry=self.registry,
        )
        self.deferred = Counter(
            "switchyard_bulk_deferred",
            "Entries the gateway had no room for (429/503): put back, not an attempt.",
            ["pool"],
            registry=self.registry,
        )
        self.inflight = Gauge(
            "switchyard_bulk_inflight", "Batch entries running now.", ["pool"], registry=self.registry
        )
        self.room_tokens = Gauge(
            "switchyard_bulk_room_tokens",
            "KV tokens bulk may take in the pool now (0 while interactive requests wait).",
            ["pool"],
            registry=self.registry,
        )
        self.pending = Gauge(
            "switchyard_bulk_pending_entries",
            "Entries of active batches not yet ended, per team.",
            ["team"],
            registry=self.registry,
        )
        self.at_risk = Gauge(
            "switchyard_bulk_batches_at_risk",
            "Active batches that, at their pace so far, would miss their deadline.",
            ["team"],
            registry=self.registry,
        )
