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

from bulk.release_policy import Candidate, CompletionRate, DeadlineRisk, PoolLoad, ReleaseOrder, RoomPolicy
from fleet.signals import BulkDemand
from fleet.sim.recorder import BatchOutcome


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
        """
        budget = self.room.budget(self.room.note(load, now))
        released: list[Release] = []
        while len(released) < limit and budget.open:
            candidates: list[Candidate] = []
            sizes: dict[str, tuple[SimBatch, int, int]] = {}
            for batch in self.batches:
                if batch.unreleased <= 0 or now >= batch.outcome.deadline_s:
                    continue
                size = min(self.entry_requests, batch.unreleased, budget.requests)
                cost = head_tokens(batch, size)
                sizes[batch.outcome.batch_id] = (batch, size, cost)
                candidates.append(
                    Candidate(
                        batch_id=batch.outcome.batch_id,
                        team_id=batch.outcome.team_id,
                        deadline=batch.outcome.deadline_s,
                        created_at=batch.created_s,
                        head_cost=cost,
                        at_risk=self.at_risk(batch, now),
                    )
                )
            head = self.order.peek(candidates)
            if head is None or not budget.allows(head.head_cost):
                break
            self.order.pick(candidates)
            batch, size, cost = sizes[head.batch_id]
            if cost > budget.tokens:  # let through alone, as the live dispatcher's one entry is
                size, cost = 1, head_tokens(batch, 1)
            first = batch.released
            batch.released += size
            self.inflight_tokens += cost
            self.inflight_requests += size
            budget.spend(cost, size)
            released.append(Release(batch, first, size, cost))
        return released

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
