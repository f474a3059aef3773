"""The bulk dispatcher as the simulator runs it: the dispatcher's own `RoomPolicy`,
`ReleaseOrder` and `DeadlineRisk`, over batches held in memory instead of Redis Streams.

Every tick: the pool's load ─▶ RoomPolicy.budget ─▶ while it allows the head entry,
ReleaseOrder.pick (at-risk batches first, then deficit round robin across teams, EDF within a
team) ─▶ the caller admits and routes the entry. An entry is one request in the exact mode and a
chunk of requests in the fast mode (the live dispatcher also queues chunks of lines).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from autoscaler.signals import BulkDemand
from bulk.release_policy import Candidate, CompletionRate, DeadlineRisk, PoolLoad, ReleaseOrder, RoomPolicy
from simulator.recorder import BatchOutcome


@dataclass(slots=True)
class SimBatch:
    """A batch's progress: entries released, requests done, its recent completion rate."""

    outcome: BatchOutcome
    created_s: float
    mean_request_tokens: float
    released: int = 0  # requests released so far
    rate: CompletionRate | None = None

    @property
    def unreleased(self) -> int:
        return self.outcome.count - self.released

    @property
    def remaining(self) -> int:
        return self.outcome.count - self.outcome.done


@dataclass(frozen=True, slots=True)
class Release:
    """One released entry: `requests` requests of `tokens` lease tokens in all."""

    batch: SimBatch
    first: int  # index in the batch of its first request
    requests: int
    tokens: int


@dataclass(frozen=True, slots=True)
class _Head:
    """A batch's next entry within one release pass: `size` requests, offered as `candidate`."""

    batch: SimBatch
    size: int
    candidate: Candidate


class BulkFeed:
    """Batches waiting for room, and the dispatcher's policies that release them."""

    def __init__(self, room: RoomPolicy, order: ReleaseOrder, risk: DeadlineRisk, entry_requests: int) -> None:
        self.room = room
        self.order = order
        self.risk = risk
        self.entry_requests = entry_requests
        self.batches: list[SimBatch] = []
        self.inflight_tokens = 0
        self.inflight_requests = 0

    def add(self, outcome: BatchOutcome, now: float, mean_request_tokens: float) -> SimBatch:
        batch = SimBatch(outcome, now, mean_request_tokens, rate=CompletionRate(window_s=600.0))
        self.batches.append(batch)
        return batch

    def at_risk(self, batch: SimBatch, now: float) -> bool:
        assert batch.rate is not None
        return self.risk.at_risk(batch.remaining, batch.rate.per_s(), now, batch.outcome.deadline_s)

    def release(
        self, load: PoolLoad, now: float, head_tokens: Callable[[SimBatch, int], int], limit: int = 100_000
    ) -> list[Release]:
        """Entries to release into the pool now, in the dispatcher's order, within its room.

        `head_tokens(batch, requests)` is the lease of the batch's next entry of `requests`
        (the one starting at index `batch.released`).

        A pass releases tens of entries among a handful of batches, so each batch's candidate is
        built once and rebuilt only when its head changes: the batch just released from, or one
        whose entry the shrinking budget cuts short. Its risk is read once a pass, since nothing
        finishes during one. (Rebuilding every candidate for every entry made this pass 30% of
        the fast mode's time: docs/simulator.md, "Run time".)
        """
        budget = self.room.budget(self.room.note(load, now))
        released: list[Release] = []
        ready: list[SimBatch] | None = None  # batches with entries left, found at the first entry
        heads: dict[str, _Head] = {}
        risk: dict[str, bool] = {}
        while len(released) < limit and budget.open:
            if ready is None:
                ready = [b for b in self.batches if b.unreleased > 0 and now < b.outcome.deadline_s]
                risk = {b.outcome.batch_id: self.at_risk(b, now) for b in ready}
            # In batch order, as the entries' leases are drawn (the exact mode samples a head's
            # lengths the first time it is asked for them).
            for batch in ready:
                batch_id = batch.outcome.batch_id
                entry = heads.get(batch_id)
                if entry is None or entry.size != min(self.entry_requests, batch.unreleased, budget.requests):
                    heads[batch_id] = self._head(batch, budget.requests, risk[batch_id], head_tokens)
            candidates = [heads[b.outcome.batch_id].candidate for b in ready]
            if not candidates:
                break
            # `peek` first only when the chosen head might not fit: when the dearest fits, so
            # does whichever `pick` chooses (the same choice, charged), and one choice is half
            # the order's cost.
            if budget.allows(max(c.head_cost for c in candidates)):
                head = self.order.pick(candidates)
            else:
                head = self.order.peek(candidates)
                if head is None or not budget.allows(head.head_cost):
                    break
                self.order.pick(candidates)
            if head is None:
                break
            chosen = heads.pop(head.batch_id)  # its head moves on
            batch, size, cost = chosen.batch, chosen.size, head.head_cost
            if cost > budget.tokens:  # let through alone, as the live dispatcher's one entry is
                size, cost = 1, head_tokens(batch, 1)
            first = batch.released
            batch.released += size
            self.inflight_tokens += cost
            self.inflight_requests += size
            budget.spend(cost, size)
            released.append(Release(batch, first, size, cost))
            if batch.unreleased <= 0:
                ready.remove(batch)
        return released

    def _head(
        self, batch: SimBatch, budget_requests: int, at_risk: bool, head_tokens: Callable[[SimBatch, int], int]
    ) -> _Head:
        """The batch's next entry as the release order sees it."""
        size = min(self.entry_requests, batch.unreleased, budget_requests)
        cost = head_tokens(batch, size)
        outcome = batch.outcome
        candidate = Candidate(
            batch_id=outcome.batch_id,
            team_id=outcome.team_id,
            deadline=outcome.deadline_s,
            created_at=batch.created_s,
            head_cost=cost,
            at_risk=at_risk,
        )
        return _Head(batch, size, candidate)

    def done(self, batch: SimBatch, requests: int, tokens: int, now: float) -> None:
        """`requests` of the batch's released requests finished (their leases end)."""
        self.inflight_tokens -= tokens
        self.inflight_requests -= requests
        batch.outcome.done += requests
        assert batch.rate is not None
        batch.rate.observe(batch.outcome.done, now)
        if batch.outcome.done >= batch.outcome.count and batch.outcome.finished_s is None:
            batch.outcome.finished_s = now

    def returned(self, batch: SimBatch, requests: int, tokens: int) -> None:
        """Released entries that admission refused go back to the head of their batch."""
        batch.released -= requests
        self.inflight_tokens -= tokens
        self.inflight_requests -= requests

    def demand(self, now: float) -> tuple[BulkDemand, ...]:
        """What the autoscaler is told: each open batch's tokens left and its deadline."""
        return tuple(
            BulkDemand(tokens_left=int(b.remaining * b.mean_request_tokens), deadline=b.outcome.deadline_s)
            for b in self.batches
            if b.remaining > 0 and now < b.outcome.deadline_s
        )

    def backlog(self, now: float) -> tuple[int, int]:
        """(requests not done in open batches, of which in batches at risk)."""
        total = at_risk = 0
        for b in self.batches:
            if b.remaining > 0 and now < b.outcome.deadline_s:
                total += b.remaining
                if self.at_risk(b, now):
                    at_risk += b.remaining
        return total, at_risk
