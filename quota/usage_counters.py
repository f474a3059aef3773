"""Prometheus counters with the same figures as the Redis usage meter.

Each gateway process counts what it served; Prometheus sums the processes. Redis stays the
record of what was used (the bill, `GET /v1/usage`); these counters are for dashboards and
alerts (rates, a team's share of tokens right now).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from quota.usage import UsageRecord

_LABELS = ("team", "model", "request_class")


class UsageCounters:
    """`switchyard_usage_*_total{team, model, request_class}` in the gateway's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, documentation: str) -> Counter:
            return Counter(f"switchyard_usage_{name}", documentation, _LABELS, registry=registry)

        self.requests = counter("requests", "Requests that ended (finished, failed or cancelled).")
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens of ended requests, cached ones included.")
        self.cached_tokens = counter("cached_tokens", "Prompt tokens served from the prefix cache.")
        self.completion_tokens = counter("completion_tokens", "Completion tokens the clients got (billed).")
        self.discarded_tokens = counter(
            "discarded_tokens", "Tokens engines wrote past a reply's end (a stop string): work, never billed."
        )
        self.cancelled = counter("cancelled_requests", "Requests the client cancelled.")
        self.kv_token_seconds = counter("kv_token_seconds", "KV cache tokens held × seconds held.")

    def observe(self, rec: UsageRecord) -> None:
        """Count one usage record (call it where `UsageMeter.record` is called)."""
        labels = {"team": rec.team_id, "model": rec.model_id, "request_class": rec.request_class}
        self.requests.labels(**labels).inc(rec.requests)
        self.prompt_tokens.labels(**labels).inc(rec.prompt_tokens)
        self.cached_tokens.labels(**labels).inc(rec.cached_tokens)
        self.completion_tokens.labels(**labels).inc(rec.completion_tokens)
        self.discarded_tokens.labels(**labels).inc(rec.discarded_tokens)
        if rec.cancelled:
            self.cancelled.labels(**labels).inc(rec.requests)
        else:
            self.cancelled.labels(**labels)  # present at 0, so rate() queries see the series
        self.kv_token_seconds.labels(**labels).inc(rec.kv_token_seconds)
