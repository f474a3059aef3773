"""Interactive-shaped requests waiting for room in a full pool: by tier, then in weighted fair
order inside each tier.

A waiter of a higher tier (a lower `rank`: contracts/service_tier.py's CLASS_RANK) is always
ahead of every waiter of a lower one; inside a tier, teams take turns by their weight in it.

When the fleet (not the team) is full, an interactive request waits here for a bounded time
rather than failing at once (every request first tries on arrival; only those that found no
room queue). Waiters are ordered by weighted fair queuing tags: a request of N tokens from a
team of weight w finishes, in virtual time, N / w after the later of its team's previous finish
and the virtual time now. The waiter with the smallest finish tag is the head; only the head
tries again, so the room that frees goes first to the team that has been served least for its
weight, and a small request of a light team is not stuck behind a flood of large ones from a
heavy team:

    team a (w=1): [a1 400]─────────────────[a2 400]                 finish 400, 800
    team b (w=2): [b1 400]──[b2 400]                                finish 200, 400
    head order:   b1 (200), a1 (400, joined first), b2 (400), a2 (800)

A waiter is woken (`kick`) when room may have freed: a lease released in this process, or the
pool's capacity changed. The caller also polls on a short interval, since other gateway
processes release leases too.

Fairness across gateway processes is approximate: each process queues its own waiters, so
two processes each have a head that tries in turn. What stays exact is the Redis lease check:
whoever tries, no admission exceeds the pool's capacity.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
from collections import Counter


class FairOrder:
    """The virtual-time arithmetic of weighted fair queuing, with no waiting of its own."""

    def __init__(self) -> None:
        self.virtual_time = 0.0
        self._last_finish: dict[str, float] = {}

    def tag(self, team_id: str, tokens: int, weight: float) -> tuple[float, float]:
        """(start, finish) tags of a new request; the team's next request starts after it."""
        start = max(self.virtual_time, self._last_finish.get(team_id, 0.0))
        finish = start + tokens / weight
        self._last_finish[team_id] = finish
        return start, finish

    def served(self, start: float) -> None:
        """A request left the queue to run: virtual time reaches its start tag."""
        self.virtual_time = max(self.virtual_time, start)
        # Teams whose last finish is behind virtual time start from it anyway: forget them.
        self._last_finish = {t: f for t, f in self._last_finish.items() if f > self.virtual_time}

    def withdrawn(self, team_id: str, start: float, finish: float) -> None:
        """A request left without running: if it was its team's last, the team is not charged."""
        if self._last_finish.get(team_id) == finish:
            self._last_finish[team_id] = start


class Waiter:
    """One queued request. Loop: `await wait(...)`, and when `is_head`, try to reserve."""

    __slots__ = ("_event", "_queue", "finish", "rank", "seq", "start", "team_id", "tokens")

    def __init__(
        self, queue: FairQueue, team_id: str, tokens: int, start: float, finish: float, seq: int, rank: int
    ) -> None:
        self._queue = queue
        self._event = asyncio.Event()
        self.team_id = team_id
        self.tokens = tokens
        self.start = start
        self.finish = finish
        self.seq = seq
        self.rank = rank

    @property
    def is_head(self) -> bool:
        return self._queue.head() is self

    async def wait(self, timeout_s: float) -> None:
        """Until this waiter is kicked as head, or `timeout_s` passes (then the caller polls)."""
        if not self._event.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._event.wait(), max(timeout_s, 0.0))
        self._event.clear()

    def leave(self, served: bool) -> None:
        """Leave the queue: `served` when admitted, else it gave up (timeout, refusal, cancel)."""
        self._queue._remove(self, served)

    def _kick(self) -> None:
        self._event.set()


class FairQueue:
    """One pool's waiters in this process: by tier, in weighted fair order inside each."""

    def __init__(self) -> None:
        self._orders: dict[int, FairOrder] = {}  # per tier: teams' turns are counted per tier
        self._waiters: list[Waiter] = []  # sorted by (rank, finish, seq)
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._waiters)

    def head(self) -> Waiter | None:
        return self._waiters[0] if self._waiters else None

    def lengths(self) -> dict[str, int]:
        """Waiters per team."""
        return dict(Counter(waiter.team_id for waiter in self._waiters))

    def join(self, team_id: str, tokens: int, weight: float, kick: bool = True, rank: int = 0) -> Waiter:
        """Queue a request of tier `rank` (0 first) with the team's `weight` in that tier; if it
        lands at the head it is kicked at once, so it tries now (`kick=False`: it has just tried
        and found no room)."""
        start, finish = self._orders.setdefault(rank, FairOrder()).tag(team_id, tokens, weight)
        waiter = Waiter(self, team_id, tokens, start, finish, next(self._seq), rank)
        bisect.insort(self._waiters, waiter, key=lambda w: (w.rank, w.finish, w.seq))
        if kick and self._waiters[0] is waiter:
            waiter._kick()
        return waiter

    def kick(self) -> None:
        """Room may have freed: the head tries again."""
        if self._waiters:
            self._waiters[0]._kick()

    def _remove(self, waiter: Waiter, served: bool) -> None:
        if waiter not in self._waiters:
            return
        was_head = self._waiters[0] is waiter
        self._waiters.remove(waiter)
        order = self._orders[waiter.rank]
        if served:
            order.served(waiter.start)
        else:
            order.withdrawn(waiter.team_id, waiter.start, waiter.finish)
        if was_head:
            self.kick()  # the next waiter's turn: there may be room for it too
