"""The gateway's admission waits per request class over a stretch of a run, from two scrapes of
its `/metrics` (`switchyard_gateway_admission_wait_seconds`, every worker's summed): how much of
a tier's time to first token was spent queued for a lease, and how much after it.

    before = scrape(url) ... the load ... waits = admission_waits(before, scrape(url))
"""

from __future__ import annotations

import math
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

METRIC = "switchyard_gateway_admission_wait_seconds"

# (request_class, le) -> cumulative count; (request_class, "sum") -> seconds summed.
Scrape = dict[tuple[str, str], float]


def scrape(gateway_url: str, pool: str) -> Scrape:
    """The admission-wait histogram of `pool`, per class, as the gateway reports it now."""
    with urllib.request.urlopen(f"{gateway_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    values: Scrape = {}
    for family in text_string_to_metric_families(text):
        if family.name != METRIC:
            continue
        for sample in family.samples:
            if sample.labels.get("pool") != pool:
                continue
            request_class = sample.labels["request_class"]
            if sample.name.endswith("_bucket"):
                values[(request_class, sample.labels["le"])] = sample.value
            elif sample.name.endswith("_sum"):
                values[(request_class, "sum")] = sample.value
    return values


@dataclass(frozen=True, slots=True)
class AdmissionWait:
    """One class's admissions between two scrapes: how many, the mean wait, and the bucket
    bounds its median and p99 fall under (the histogram's resolution)."""

    count: int
    mean_ms: float
    p50_le_ms: float | None  # None: beyond the last finite bucket
    p99_le_ms: float | None


def admission_waits(before: Scrape, after: Scrape) -> dict[str, AdmissionWait]:
    """Per class, the admissions that happened between `before` and `after`."""
    classes = {request_class for request_class, _ in after}
    result = {}
    for request_class in sorted(classes):
        buckets = sorted(
            (float(le), value - before.get((c, le), 0.0))
            for (c, le), value in after.items()
            if c == request_class and le != "sum"
        )
        count = buckets[-1][1] if buckets else 0.0
        if count <= 0:
            continue
        waited = after.get((request_class, "sum"), 0.0) - before.get((request_class, "sum"), 0.0)
        result[request_class] = AdmissionWait(
            int(count), round(waited / count * 1000, 1), _bound_ms(buckets, count, 0.5), _bound_ms(buckets, count, 0.99)
        )
    return result


def _bound_ms(buckets: list[tuple[float, float]], count: float, q: float) -> float | None:
    """The upper bound (ms) of the first bucket holding the q-quantile; None past the last
    finite one."""
    for le, cumulative in buckets:
        if cumulative >= q * count:
            return None if math.isinf(le) else le * 1000
    return None
