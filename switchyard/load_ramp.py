"""A scripted load: requests per second over time, linear between the points given.

    "0:1,60:6,180:6,240:1"     t (s) : req/s

    req/s
      6 |        __________
        |      /            \\
      1 |____/                \\
        0    60        180   240  s

Arrivals are spaced deterministically: request k leaves when the ramp's integral reaches k
(∫₀ᵗ rate = k), so the same ramp sends the same requests at the same offsets every run, and
a rehearsal taught to the autoscaler (`switchyard load --rehearse`) is exactly what follows.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Ramp:
    points: tuple[tuple[float, float], ...]  # (t, req/s), t strictly increasing from 0

    def __post_init__(self) -> None:
        if len(self.points) < 2:
            raise ValueError("a ramp needs at least two points, e.g. 0:1,60:6")
        if self.points[0][0] != 0:
            raise ValueError(f"a ramp starts at t=0, not {self.points[0][0]:g}")
        times = [t for t, _ in self.points]
        if any(b <= a for a, b in itertools.pairwise(times)):
            raise ValueError(f"ramp times must increase: {times}")
        if any(rate < 0 for _, rate in self.points):
            raise ValueError("ramp rates must be >= 0")

    @classmethod
    def parse(cls, text: str) -> Ramp:
        """ "0:1,60:6,180:6,240:1" → Ramp; ValueError with what is wrong."""
        points = []
        for part in text.split(","):
            t, sep, rate = part.strip().partition(":")
            if not sep:
                raise ValueError(f"ramp point {part!r} is not TIME:RATE")
            try:
                points.append((float(t), float(rate)))
            except ValueError:
                raise ValueError(f"ramp point {part!r} is not TIME:RATE (numbers)") from None
        return cls(tuple(points))

    @property
    def duration_s(self) -> float:
        return self.points[-1][0]

    def rate_at(self, t: float) -> float:
        """req/s at `t` seconds into the ramp (0 outside it)."""
        if t < 0 or t > self.duration_s:
            return 0.0
        for (t0, r0), (t1, r1) in itertools.pairwise(self.points):
            if t <= t1:
                return r0 + (r1 - r0) * (t - t0) / (t1 - t0)
        return self.points[-1][1]

    def peak_at(self) -> float:
        """When the ramp first reaches its highest rate."""
        return max(self.points, key=lambda p: (p[1], -p[0]))[0]

    def arrivals(self) -> list[float]:
        """Offsets (s) at which requests leave: request k when ∫₀ᵗ rate reaches k (k = 1, 2 ...)."""
        offsets: list[float] = []
        done = 0.0  # requests' worth sent before the current segment
        for (t0, r0), (t1, r1) in itertools.pairwise(self.points):
            span = t1 - t0
            area = (r0 + r1) / 2 * span
            k = len(offsets) + 1
            while k <= done + area + 1e-9:
                offsets.append(t0 + _time_for(k - done, r0, r1, span))
                k += 1
            done += area
        return offsets


def _time_for(area: float, r0: float, r1: float, span: float) -> float:
    """The τ in [0, span] where ∫₀^τ (r0 + (r1 − r0)·s/span) ds = area."""
    slope = (r1 - r0) / span
    if abs(slope) < 1e-12:
        return area / r0 if r0 > 0 else span
    # slope/2 · τ² + r0 · τ − area = 0
    disc = max(0.0, r0 * r0 + 2 * slope * area)
    return min(span, (-r0 + math.sqrt(disc)) / slope)
