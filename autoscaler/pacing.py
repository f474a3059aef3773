"""From a pool's computed need to the target it is told: bounds, scale out at once, scale in
slowly.

    need ≥ current  ─▶ target = need (now: a server takes minutes to help)
    need < current  ─▶ held while any server is still starting (it was started for this need)
                       held until the need has stayed below for `scale_in_after_s`
                       then one copy fewer per decision (the caller drains it)

A need back at or above the current count resets the hold, so a dip between two bursts never
drains a server the second burst needs. Scaling in one copy at a time lets each drain finish its
replies and gives the need a decision to rise again before the next one goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from bulk.deadlines import format_duration


@dataclass(frozen=True, slots=True)
class PacedTarget:
    """The copies to run, and the reasons the pacing adds (bounds, holds, a drain)."""

    target: int
    reasons: tuple[str, ...]


class TargetPacer:
    """Turns needs into targets for one pool; remembers since when the need has been below."""

    def __init__(self, *, min_copies: int, max_copies: int, scale_in_after_s: float) -> None:
        if min_copies < 0:
            raise ValueError(f"min_copies must be >= 0, got {min_copies}")
        if max_copies < max(min_copies, 1):
            raise ValueError(f"max_copies must be >= max(min_copies, 1), got {max_copies} (min {min_copies})")
        if scale_in_after_s < 0:
            raise ValueError(f"scale_in_after_s must be >= 0, got {scale_in_after_s}")
        self.min_copies = min_copies
        self.max_copies = max_copies
        self._hold_s = scale_in_after_s
        self._below_since: float | None = None

    def pace(self, *, now: float, current: int, starting: int, need: int) -> PacedTarget:
        """The target for a pool running `current` copies (ready + starting) that needs `need`."""
        reasons: list[str] = []
        bounded = min(max(need, self.min_copies), self.max_copies)
        if bounded != need:
            side = "max" if need > self.max_copies else "min"
            reasons.append(f"need {need} held to {side} {bounded}")
        if bounded >= current:
            self._below_since = None
            return PacedTarget(bounded, tuple(reasons))
        if self._below_since is None:
            self._below_since = now
        below_s = now - self._below_since
        if starting > 0:
            reasons.append(f"scale-in held: {starting} still starting")
            return PacedTarget(current, tuple(reasons))
        if below_s < self._hold_s:
            reasons.append(f"scale-in held: need {bounded} below {current} for {below_s:.0f} s of {self._hold_s:.0f}")
            return PacedTarget(current, tuple(reasons))
        reasons.append(f"scale-in: need {bounded} below {current} for {format_duration(below_s)}: drain one")
        return PacedTarget(current - 1, tuple(reasons))
