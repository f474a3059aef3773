"""Requests that ended, per model and class, between two reads: the usage buckets in Redis.

Every gateway process adds each finished request to its team's hour bucket
(`quota.usage.UsageMeter`), so one read of the buckets counts the requests of every gateway
and worker process alike (each gateway's own /metrics counts only its own). A read takes the
hour buckets from the previous read's hour to now and differences them per (model, hour), so a
read that crosses the hour counts the end of the old hour and the start of the new one.

    ended(model, class) = Σ_hours [requests(model, class, hour)_now − the same at the last read]

for the classes that arrive as a rate (priority, interactive, flex: contracts/service_tier.py's
interactive-shaped ones; bulk is read from its batches). The caller sums the demand classes for
the rate servers are started for (`autoscaler/demand_classes.py`). A request is counted when it
ends, not when it arrives: the live signals add the change in the engines' requests of each
class to turn this into arrivals (`autoscaler.live_signals`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contracts.service_tier import INTERACTIVE_SHAPED, RequestClass
from quota.usage import UsageMeter, hour_start

EndedCounts = dict[str, dict[RequestClass, int]]  # model -> class -> requests ended


class EndedRequests:
    """Counts requests of the interactive-shaped classes ended per model since the previous `read`."""

    def __init__(self, meter: UsageMeter) -> None:
        self._meter = meter
        self._last: dict[tuple[str, RequestClass, datetime], int] | None = None
        self._last_at: float | None = None

    async def read(self, now: float) -> EndedCounts | None:
        """Model -> class -> requests ended since the previous read (a class the buckets hold
        no request of is absent); None on the first read (there is nothing to difference against yet)."""
        since = now if self._last_at is None else self._last_at
        start = hour_start(datetime.fromtimestamp(since, UTC))
        end = datetime.fromtimestamp(now, UTC) + timedelta(seconds=1)
        rows = await self._meter.query(None, start, end, by_hour=True)
        counts: dict[tuple[str, RequestClass, datetime], int] = {}
        shaped: dict[str, RequestClass] = {c: c for c in INTERACTIVE_SHAPED}
        for row in rows:
            request_class = shaped.get(row.request_class)
            if request_class is not None and row.hour is not None:
                key = (row.model_id, request_class, row.hour)
                counts[key] = counts.get(key, 0) + row.requests
        last, self._last, self._last_at = self._last, counts, now
        if last is None:
            return None
        ended: EndedCounts = {}
        for key, count in counts.items():
            model_id, request_class, _ = key
            by_class = ended.setdefault(model_id, {})
            by_class[request_class] = by_class.get(request_class, 0) + max(0, count - last.get(key, 0))
        return ended
