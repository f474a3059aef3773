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
    """What to emit now, what to hold for the next delta, and whether the reply must end.

    `after_stop`: with `stop_hit`, how many characters of `held + delta` follow the end of the
    stop string that ended the reply (what tells usage which tokens the reply had)."""

    emit: str
    held: str
    stop_hit: bool
    after_stop: int = 0


def _earliest_match(text: str, stops: Sequence[str]) -> tuple[int, int] | None:
    """Start and end of the earliest stop string in `text` (the first listed on a tie)."""
    best: tuple[int, int] | None = None
    for stop in stops:
        if not stop:
            continue
        index = text.find(stop)
        if index >= 0 and (best is None or index < best[0]):
            best = (index, index + len(stop))
    return best


def _holdback_length(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of some stop string.

    Linear per stop in the text it scans, at most the last `len(stop) - 1` characters (KMP),
    where trying every prefix length with `endswith` was quadratic in it on every delta. A
    short delta with little held back costs little, however long the stop string."""
    longest = 0
    for stop in stops:
        if len(stop) > 1 and text and text[-1] in stop:  # most deltas end in no stop's letter
            longest = max(longest, _suffix_prefix_overlap(text[-(len(stop) - 1) :], stop))
    return longest


def _suffix_prefix_overlap(tail: str, stop: str) -> int:
    """Longest k such that `tail` ends with `stop[:k]` (k < len(stop) as len(tail) < len(stop)):
    the state of the Knuth-Morris-Pratt matcher of `stop` after reading `tail`. The matcher
    never gets further into `stop` than `len(tail)`, so only that much of it is prepared."""
    failure = _failure_function(stop[: len(tail)])
    matched = 0
    for char in tail:
        while matched and stop[matched] != char:
            matched = failure[matched - 1]
        if stop[matched] == char:
            matched += 1
    return matched


def _failure_function(pattern: str) -> list[int]:
    """`failure[i]`: length of the longest proper prefix of `pattern[: i + 1]` that is also its
    suffix (KMP's prefix function), in O(len(pattern))."""
    failure = [0] * len(pattern)
    k = 0
    for i in range(1, len(pattern)):
        while k and pattern[i] != pattern[k]:
            k = failure[k - 1]
        if pattern[i] == pattern[k]:
            k += 1
        failure[i] = k
    return failure


def scan_stop_strings(held: str, delta: str, stops: Sequence[str], *, is_final: bool) -> StopScan:
    """Scan `held + delta` for stop strings.

    `held` is the text this function held back on the previous call for the same reply.
    """
    text = held + delta
    match = _earliest_match(text, stops)
    if match is not None:
        start, end = match
        return StopScan(emit=text[:start], held="", stop_hit=True, after_stop=len(text) - end)
    if is_final:
        return StopScan(emit=text, held="", stop_hit=False)
    keep = _holdback_length(text, stops)
    return StopScan(emit=text[: len(text) - keep], held=text[len(text) - keep :], stop_hit=False)
