"""Latency percentiles without keeping every sample: log-spaced buckets, 2% apart.

A day at the brief's scale delivers billions of tokens; a histogram per hour keeps the
inter-token gaps in ~1,000 counters each, and its percentiles are within one bucket (2%) of
the exact ones. Counts are floats so the fast mode can weight a probe's samples by the traffic
they stand for.
"""

from __future__ import annotations

import math

_LOW_S = 1e-4
_RATIO = 1.02
_LOG_RATIO = math.log(_RATIO)
_NUM_BUCKETS = int(math.log(1e5 / _LOW_S) / _LOG_RATIO) + 2


class Histogram:
    """Counts of values (seconds, 0.1 ms to a day) in log buckets; weighted percentiles."""

    __slots__ = ("_last_index", "_last_value", "counts", "max_value", "total")

    def __init__(self) -> None:
        self.counts = [0.0] * _NUM_BUCKETS
        self.total = 0.0
        self.max_value = 0.0
        # The bucket of the value added last: the replies of one engine step get their tokens
        # at once, so a run of equal inter-token gaps is the common case and skips the log.
        self._last_value: float | None = None
        self._last_index = 0

    def add(self, value: float, weight: float = 1.0) -> None:
        if value == self._last_value:
            index = self._last_index
        else:
            index = 0 if value <= _LOW_S else min(int(math.log(value / _LOW_S) / _LOG_RATIO) + 1, _NUM_BUCKETS - 1)
            self._last_value, self._last_index = value, index
        self.counts[index] += weight
        self.total += weight
        if value > self.max_value:
            self.max_value = value

    def merge(self, other: Histogram, weight: float = 1.0) -> None:
        """Add `other`'s counts, each scaled by `weight`."""
        counts = self.counts
        for i, count in enumerate(other.counts):
            if count:
                counts[i] += count * weight
        self.total += other.total * weight
        self.max_value = max(self.max_value, other.max_value)

    def percentile(self, q: float) -> float | None:
        """The value at quantile q (0..1): the upper edge of its bucket; None when empty."""
        if self.total <= 0:
            return None
        target = q * self.total
        running = 0.0
        for i, count in enumerate(self.counts):
            running += count
            if running >= target and count:
                return min(_LOW_S * _RATIO**i, self.max_value)
        return self.max_value
