"""Stop strings over a stream of text deltas.

A stop string can arrive split over several deltas ("Obs" + "erv" + "ation:"), so text that
could be the beginning of a stop string is held back until the next delta decides it:

    emitted so far        | held  | new delta
    "The answer is 4.\\n"  | "Obs" | "ervation: ..."
                            └──── scan this ───┘

The reply ends right before the earliest occurrence of any stop string; the stop string and
everything after it are dropped. When nothing matches, all text except the longest tail that is
a proper prefix of some stop string is emitted. On the final delta the held text is flushed.

Why the earliest match is always found: a stop string that starts inside already-emitted text
and ends in new text would need that emitted tail to be a prefix of it; but such a tail is
exactly what was held back, so every possible start lies in `held + delta`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StopScan:
    """What to emit now, what to hold for the next delta, and whether the reply must end."""

    emit: str
    held: str
    stop_hit: bool


def _earliest_match(text: str, stops: Sequence[str]) -> int | None:
    best: int | None = None
    for stop in stops:
        if not stop:
            continue
        index = text.find(stop)
        if index >= 0 and (best is None or index < best):
            best = index
    return best


def _holdback_length(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of some stop string."""
    longest = 0
    for stop in stops:
        for length in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:length]):
                longest = length
                break
    return longest


def scan_stop_strings(held: str, delta: str, stops: Sequence[str], *, is_final: bool) -> StopScan:
    """Scan `held + delta` for stop strings.

    `held` is the text this function held back on the previous call for the same reply.
    """
    text = held + delta
    match = _earliest_match(text, stops)
    if match is not None:
        return StopScan(emit=text[:match], held="", stop_hit=True)
    if is_final:
        return StopScan(emit=text, held="", stop_hit=False)
    keep = _holdback_length(text, stops)
    return StopScan(emit=text[: len(text) - keep], held=text[len(text) - keep :], stop_hit=False)
