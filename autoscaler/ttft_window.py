"""Recent time to first token of the demand classes, p99, from the gateway's Prometheus histogram.

The gateway exports `switchyard_gateway_time_to_first_token_seconds` (cumulative buckets per
model and class). Only the classes servers are started for count (priority and interactive,
`autoscaler/demand_classes.py`): a flex request's first token may wait for room by design, and
bulk's is paced by its deadline. The p99 of the *recent* requests is read from the difference
of two scrapes:

    Δbucket(le) = bucket(le)_now − bucket(le)_before      (the demand classes summed, the pool's models)
    p99 = the smallest bound `le` with Δbucket(le) ≥ 0.99 · Δcount      (a bucket's upper edge)

A bucket estimate errs upwards by at most one bucket (0.5 s → 1 s), which is the safe side for
a scale-out signal. A scrape whose counts went down (the gateway restarted, or a different
worker process of a multi-worker gateway answered) is not differenced: it becomes the new
baseline and the window reads None. Scrape each gateway process as its own target where you
can (a pod each on Kubernetes); see docs/autoscaler.md.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable

from prometheus_client.parser import text_string_to_metric_families

from autoscaler.demand_classes import DEMAND_CLASSES

TTFT_METRIC = "switchyard_gateway_time_to_first_token_seconds"

Buckets = dict[tuple[str, float], float]  # (model, le) -> cumulative count


def parse_ttft_buckets(metrics_text: str, request_classes: Collection[str] = DEMAND_CLASSES) -> Buckets:
    """The cumulative TTFT buckets of `request_classes`, summed, in a gateway's /metrics text,
    per model."""
    buckets: Buckets = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != TTFT_METRIC:
            continue
        for sample in family.samples:
            if sample.name == f"{TTFT_METRIC}_bucket" and sample.labels.get("request_class") in request_classes:
                key = (sample.labels.get("model", ""), float(sample.labels["le"]))
                buckets[key] = buckets.get(key, 0.0) + sample.value
    return buckets


def p99_of(delta: dict[float, float]) -> float | None:
    """The 99th percentile's bucket bound of a (non-cumulative-over-time, cumulative-over-le)
    bucket delta; None without samples. Past the last finite bound: that bound."""
    total = delta.get(math.inf, 0.0)
    if total <= 0:
        return None
    finite = sorted(le for le in delta if math.isfinite(le))
    for le in finite:
        if delta[le] >= 0.99 * total:
            return le
    return finite[-1] if finite else None


class TtftWindow:
    """The TTFT p99 of what one gateway target served between two scrapes, per model set."""

    def __init__(self) -> None:
        self._last: Buckets | None = None
        self._delta: Buckets = {}

    def observe(self, metrics_text: str) -> None:
        """Take a new scrape: the window becomes what happened since the previous one."""
        now = parse_ttft_buckets(metrics_text)
        last, self._last = self._last, now
        if last is None or any(now.get(key, 0.0) < count for key, count in last.items()):
            self._delta = {}  # first scrape, or a restarted / different process: a new baseline
            return
        self._delta = {key: count - last.get(key, 0.0) for key, count in now.items()}

    def forget(self) -> None:
        """The target could not be read: the next scrape starts a new window."""
        self._last, self._delta = None, {}

    def p99(self, model_ids: Iterable[str]) -> float | None:
        """p99 over the window for requests to any of `model_ids`; None without samples."""
        models = set(model_ids)
        merged: dict[float, float] = {}
        for (model_id, le), count in self._delta.items():
            if model_id in models:
                merged[le] = merged.get(le, 0.0) + count
        return p99_of(merged)
