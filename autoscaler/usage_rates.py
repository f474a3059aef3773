"""Interactive requests that ended, per model, between two reads: the usage buckets in Redis.

Every gateway process adds each finished request to its team's hour bucket
(`quota.usage.UsageMeter`), so one read of the buckets counts the requests of every gateway
and worker process alike (each gateway's own /metrics counts only its own). A read takes the
hour buckets from the previous read's hour to now and differences them per (model, hour), so a
read that crosses the hour counts the end of the old hour and the start of the new one.

    ended(model) = Σ_hours [requests(model, interactive, hour)_now − the same at the last read]

A request is counted when it ends, not when it arrives: the live signals add the change in the
engines' interactive requests to turn this into arrivals (`autoscaler.live_signals`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from quota.usage import UsageMeter, hour_start

INTERACTIVE = "interactive"


class EndedRequests:
    """Counts interactive requests ended per model since the previous `read`."""

    def __init__(self, meter: UsageMeter) -> None:
        self._meter = meter
        self._last: dict[tuple[str, datetime], int] | None = None
        self._last_at: float | None = None

    async def read(self, now: float) -> dict[str, int] | None:
        """Model -> interactive requests ended since the previous read; None on the first read
        (there is nothing to difference against yet)."""
        since = now if self._last_at is None else self._last_at
        start = hour_start(datetime.fromtimestamp(since, UTC))
        end = datetime.fromtimestamp(now, UTC) + timedelta(seconds=1)
        rows = await self._meter.query(None, start, end, by_hour=True)
        counts: dict[tuple[str, datetime], int] = {}
        for row in rows:
            if row.request_class == INTERACTIVE and row.hour is not None:
                key = (row.model_id, row.hour)
                counts[key] = counts.get(key, 0) + row.requests
        last, self._last, self._last_at = self._last, counts, now
        if last is None:
            return None
        ended: dict[str, int] = {}
        for (model_id, hour), count in counts.items():
            ended[model_id] = ended.get(model_id, 0) + max(0, count - last.get((model_id, hour), 0))
        return ended
