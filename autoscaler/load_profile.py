"""A pool's interactive demand as a time-of-day × day-of-week profile plus the recent level, so
the autoscaler can see the morning ramp coming one start-up time (eight minutes) before it lands.

The profile keeps one mean rate per time slot (`bin_s`, 15 minutes by default) for the last
`weeks` weeks, keyed by the absolute slot number `⌊t / bin_s⌋`. A slot a whole number of days or
weeks back is the same UTC time of day, and whole weeks back the same weekday, so no calendar is
needed. What the profile expects at a time t:

    the same slot on the same weekday, averaged over the weeks recorded   (Monday 9 am)
    else the same slot on the days recorded in the past week              (yesterday 9 am)
    else nothing known

and between slot centres it interpolates linearly, so a ramp reads as a ramp, not a staircase.

The forecast anchors the profile on today: the profile knows the shape of a day, the recent
level knows how today runs (a holiday at half, a launch at double).

    forecast(now, h) = level + ratio × (profile(now + h) − profile(now))
    ratio            = level / profile(now), clamped to [1 / max_ratio, max_ratio]

At h = 0 that is the level itself; a ramp the profile expects is added on top, scaled by how
today compares with the usual.

The recent trend covers what no profile has seen (a flash crowd, a launch, the first day): the
level's slope, smoothed over `trend_tau_s` (Holt's linear method), extrapolated over the horizon
when it is rising. The forecast is the larger of the two, so a ramp the profile expects and one it
does not are both seen coming; a falling trend is not extrapolated (scaling in waits for the
level itself):

    trend(now, h)    = level + max(0, slope) × h
    forecast(now, h) = max(profile forecast, trend) while the slope is rising, else the profile
                       forecast (the trend alone where the profile knows nothing)

A gap between observations longer than `trend_tau_s` resets the slope: it says nothing of a trend.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

DAY_S = 86_400
WEEK_S = 7 * DAY_S


@dataclass(frozen=True, slots=True)
class RatePeak:
    """The highest forecast rate over a window, and how far ahead it falls."""

    rate: float  # requests per second
    after_s: float  # seconds from now


@dataclass(slots=True)
class _SlotMean:
    total: float = 0.0
    count: int = 0


class LoadProfile:
    """Learned interactive demand (req/s) of one pool; `record` observations, `forecast` ahead.

    Plain state and arithmetic: the clock is the caller's (`now`, seconds since the Unix epoch or
    a simulated one), so the simulator and the live service get the same forecasts."""

    def __init__(
        self,
        *,
        bin_s: float = 900.0,
        weeks: int = 4,
        level_tau_s: float = 60.0,
        max_ratio: float = 2.0,
        trend_tau_s: float | None = 300.0,
    ) -> None:
        if bin_s <= 0 or DAY_S % bin_s != 0:
            raise ValueError(f"bin_s must divide a day (86400 s) evenly, got {bin_s}")
        if weeks < 1:
            raise ValueError(f"weeks must be at least 1, got {weeks}")
        if level_tau_s < 0:
            raise ValueError(f"level_tau_s must be >= 0, got {level_tau_s}")
        if max_ratio < 1:
            raise ValueError(f"max_ratio must be >= 1, got {max_ratio}")
        if trend_tau_s is not None and trend_tau_s <= 0:
            raise ValueError(f"trend_tau_s must be > 0 (or None: no trend), got {trend_tau_s}")
        self._bin_s = bin_s
        self._day_slots = round(DAY_S / bin_s)
        self._week_slots = 7 * self._day_slots
        self._weeks = weeks
        self._level_tau_s = level_tau_s
        self._max_ratio = max_ratio
        # Insertion order is time order in practice, so pruning pops from the front.
        self._slots: dict[int, _SlotMean] = {}
        self._level: float | None = None
        self._level_at = 0.0
        self._trend_tau_s = trend_tau_s
        self._slope = 0.0  # req/s per second, smoothed

    def record(self, now: float, rate: float) -> None:
        """One observation of the arriving interactive rate (req/s) at `now`.

        It feeds both the slot's mean and the recent level, an exponential average with time
        constant `level_tau_s` (0: the latest observation), which smooths a noisy window without
        lagging a ramp by more than about a minute."""
        if rate < 0 or not math.isfinite(rate):
            raise ValueError(f"rate must be a finite number >= 0, got {rate}")
        slot = math.floor(now / self._bin_s)
        mean = self._slots.get(slot)
        if mean is None:
            mean = self._slots[slot] = _SlotMean()
            self._forget_before(slot - self._weeks * self._week_slots)
        mean.total += rate
        mean.count += 1
        previous, elapsed = self._level, now - self._level_at
        if self._level is None or self._level_tau_s == 0:
            self._level = rate
        else:
            weight = 1.0 - math.exp(-max(0.0, elapsed) / self._level_tau_s)
            self._level += (rate - self._level) * weight
        if self._trend_tau_s is not None and previous is not None and elapsed > 0:
            if elapsed > self._trend_tau_s:
                self._slope = 0.0  # after a gap the change says nothing about a trend
            else:
                weight = 1.0 - math.exp(-elapsed / self._trend_tau_s)
                self._slope += ((self._level - previous) / elapsed - self._slope) * weight
        self._level_at = now

    @property
    def level(self) -> float:
        """The recent rate (req/s); 0 before the first observation."""
        return 0.0 if self._level is None else self._level

    @property
    def slope(self) -> float:
        """The level's recent change, req/s per second (0 with the trend off)."""
        return self._slope

    def forecast(self, now: float, horizon_s: float) -> float:
        """Expected req/s at `now + horizon_s`: the larger of the profile's change ahead anchored
        on the level, and the level's rising trend carried forward."""
        level = self.level
        trend = level + max(0.0, self._slope) * horizon_s
        expected_now = self.expected(now)
        expected_then = self.expected(now + horizon_s)
        if expected_now is None or expected_then is None:
            return trend
        ratio = 1.0 if expected_now <= 0 else level / expected_now
        ratio = min(max(ratio, 1.0 / self._max_ratio), self._max_ratio)
        profiled = max(0.0, level + ratio * (expected_then - expected_now))
        return max(profiled, trend) if self._slope > 0 else profiled

    def peak(self, now: float, horizon_s: float) -> RatePeak:
        """The highest forecast over [now, now + horizon_s].

        The forecast is linear between slot centres, so its maximum lies at one of them or at an
        end of the window: a handful of evaluations, however long the window."""
        first_centre = (math.floor(now / self._bin_s - 0.5) + 1.5) * self._bin_s
        offsets = [0.0, horizon_s]
        centre = first_centre
        while centre < now + horizon_s:
            offsets.append(centre - now)
            centre += self._bin_s
        best = RatePeak(rate=self.forecast(now, 0.0), after_s=0.0)
        for after_s in sorted(offsets):
            rate = self.forecast(now, after_s)
            if rate > best.rate:
                best = RatePeak(rate=rate, after_s=after_s)
        return best

    def expected(self, at: float) -> float | None:
        """What the recorded days say the rate at `at` is (None where they say nothing)."""
        position = at / self._bin_s - 0.5  # in slots, from the centre of slot 0
        left = math.floor(position)
        before, after = self._slot_estimate(left), self._slot_estimate(left + 1)
        if before is None or after is None:
            return after if before is None else before
        return before + (after - before) * (position - left)

    def _slot_estimate(self, slot: int) -> float | None:
        """The same slot on the same weekday in past weeks, else on the days of the past week."""
        weekly = self._mean_of(slot - k * self._week_slots for k in range(1, self._weeks + 1))
        if weekly is not None:
            return weekly
        return self._mean_of(slot - k * self._day_slots for k in range(1, 7))

    def _mean_of(self, slots: Iterable[int]) -> float | None:
        means = [m.total / m.count for s in slots if (m := self._slots.get(s)) is not None]
        return sum(means) / len(means) if means else None

    def _forget_before(self, oldest: int) -> None:
        while self._slots:
            first = next(iter(self._slots))
            if first >= oldest:
                return
            del self._slots[first]
