"""Open streams of one gateway process, shared by team weight as KV is.

A gateway process holds thousands of open streams; each costs memory, a socket and a place in
its event loop, so a process holds at most `max_streams`. When they are contended, a team is
let in below its guaranteed share, and a flooding team's excess is its own 429, never
another team's 503:

    total ≥ max_streams                      ─▶ FULL        (503 + Retry-After)
    held(team) < share(team)                 ─▶ ADMITTED    (its guaranteed share)
    total < max_streams − reserve            ─▶ ADMITTED    (borrowing idle slots)
    otherwise                                ─▶ OVER_SHARE  (429 + Retry-After)

    share(team) = max_streams × weight(team) / Σ weights of every configured team
    reserve     = max_streams × reserve_fraction

An open stream is never cut to make room, so borrowing stops `reserve` short of the maximum:
a team that arrives while another floods finds that room at once, and the rest of its share
as the flood's streams end (the flooder, past its share, is refused while the process is past
the borrowing limit). A plain object, all in memory: a dict update per stream opened or
closed, no I/O.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass


class StreamVerdict(enum.Enum):
    ADMITTED = "admitted"
    OVER_SHARE = "over_share"  # the team is past its share and no idle slot may be borrowed
    FULL = "full"  # the process holds its maximum


@dataclass(frozen=True, slots=True)
class StreamClaim:
    """What `StreamShares.claim` decided, with the figures a refusal's message gives."""

    verdict: StreamVerdict
    held: int  # the team's streams before this claim
    share: int  # the team's guaranteed share
    total: int  # the process's streams before this claim


class StreamShares:
    """Streams held per team in this process, and whether one more may open."""

    def __init__(self, max_streams: int, weights: Mapping[str, float], reserve_fraction: float = 0.1) -> None:
        if max_streams < 1 or not 0.0 <= reserve_fraction < 1.0:
            raise ValueError(
                f"need max_streams ≥ 1 and 0 ≤ reserve_fraction < 1, got {max_streams}, {reserve_fraction}"
            )
        self.max_streams = max_streams
        self.borrow_limit = max_streams - math.ceil(max_streams * reserve_fraction)
        self._weights = dict(weights)
        self._total_weight = sum(self._weights.values())
        self._held: dict[str, int] = {}
        self.total = 0

    def held(self, team_id: str) -> int:
        return self._held.get(team_id, 0)

    def share(self, team_id: str) -> int:
        """The team's guaranteed streams: `max_streams` × its weight / every team's (≥ 1); a
        team not in the weights (none in a test's config) counts as weight 1 beside them."""
        weight = self._weights.get(team_id)
        if weight is None:
            return max(1, math.floor(self.max_streams / (self._total_weight + 1.0)))
        return max(1, math.floor(self.max_streams * weight / self._total_weight))

    def claim(self, team_id: str) -> StreamClaim:
        """Open one more stream of `team_id` if the rules allow it (it is then counted)."""
        held, share, total = self.held(team_id), self.share(team_id), self.total
        if total >= self.max_streams:
            verdict = StreamVerdict.FULL
        elif held < share or total < self.borrow_limit:
            verdict = StreamVerdict.ADMITTED
            self._held[team_id] = held + 1
            self.total += 1
        else:
            verdict = StreamVerdict.OVER_SHARE
        return StreamClaim(verdict, held, share, total)

    def release(self, team_id: str) -> None:
        """One stream of `team_id` ended."""
        held = self._held[team_id] - 1
        self.total -= 1
        if held:
            self._held[team_id] = held
        else:
            del self._held[team_id]  # a team without streams costs nothing
