"""The simulated dispatcher releases what the room holds and no more, as the live one does."""

from __future__ import annotations

from bulk.release_policy import DeadlineRisk, PoolLoad, ReleaseOrder, RoomPolicy
from simulator.bulk_feed import BulkFeed, SimBatch
from simulator.recorder import BatchOutcome


def test_one_release_stays_within_the_room() -> None:
    """Entries released in one call hold no lease yet: the room must shrink with each of them
    (a load recomputed with them in flight but not leased showed the same room every time, and
    admission refused the excess back)."""
    feed = BulkFeed(RoomPolicy(0.1, 10**9), ReleaseOrder({"a": 1.0}), DeadlineRisk(), entry_requests=10)
    batch = feed.add(BatchOutcome("b", "a", 10_000, deadline_s=86_400.0), 0.0, 1_000.0)
    load = PoolLoad(
        pool_id="p",
        capacity_tokens=1_000_000,
        leased_tokens=400_000,  # people's
        bulk_inflight_tokens=0,
        bulk_inflight_requests=0,
        interactive_waiting=0,
        interactive_running=100,
    )
    releases = feed.release(load, 0.0, lambda b, n: n * 1_000)
    released = sum(r.tokens for r in releases)
    assert released == 500_000  # usable 900,000 less people's 400,000
    assert batch.released == 500
    assert feed.inflight_tokens == released
    # Nothing ended: the next tick's load carries the leases, and there is no room left.
    after = PoolLoad("p", 1_000_000, 900_000, released, 500, 0, 100)
    assert feed.release(after, 1.0, lambda b, n: n * 1_000) == []


def test_an_entry_larger_than_the_room_goes_alone_when_none_is_in_flight() -> None:
    """The live dispatcher's rule (`RoomBudget.allows`): a long entry that the room never holds
    goes by itself once the pool has none of our bulk, and waits while it has some."""
    feed = BulkFeed(RoomPolicy(0.1, 10**9), ReleaseOrder({"a": 1.0}), DeadlineRisk(), entry_requests=1)
    batch = feed.add(BatchOutcome("b", "a", 3, deadline_s=86_400.0), 0.0, 50_000.0)
    people_only = PoolLoad("p", 100_000, 80_000, 0, 0, 0, 10)  # room 10,000
    releases = feed.release(people_only, 0.0, lambda b, n: n * 50_000)
    assert [(r.requests, r.tokens) for r in releases] == [(1, 50_000)]
    assert batch.released == 1
    with_ours = PoolLoad("p", 100_000, 80_000, 50_000, 1, 0, 10)
    assert feed.release(with_ours, 1.0, lambda b, n: n * 50_000) == []


def test_a_chunk_larger_than_the_room_lets_one_request_go_not_the_chunk() -> None:
    """In the fast mode an entry is a chunk of requests: the live rule lets one entry, one
    request, go alone, so a whole chunk must not flood a pool that has room for less."""
    feed = BulkFeed(RoomPolicy(0.1, 10**9), ReleaseOrder({"a": 1.0}), DeadlineRisk(), entry_requests=100)
    batch = feed.add(BatchOutcome("b", "a", 1_000, deadline_s=86_400.0), 0.0, 2_000.0)
    people_only = PoolLoad("p", 1_000_000, 899_000, 0, 0, 0, 10)  # room 1,000
    releases = feed.release(people_only, 0.0, lambda b, n: n * 2_000)
    assert [(r.requests, r.tokens) for r in releases] == [(1, 2_000)]
    assert batch.released == 1 and feed.inflight_requests == 1


def test_an_entry_the_budget_cuts_short_is_offered_at_its_new_size() -> None:
    """A pass builds each batch's entry once and keeps it while the batch is not released from:
    once the requests left in the room fall below an entry, every batch's entry shrinks with
    them (a kept entry of the full size would take more requests than the room has)."""
    room = RoomPolicy(0.0, max_inflight_requests=25)
    feed = BulkFeed(room, ReleaseOrder({"a": 1.0, "b": 1.0}), DeadlineRisk(), entry_requests=10)
    feed.add(BatchOutcome("a1", "a", 1_000, deadline_s=86_400.0), 0.0, 100.0)
    feed.add(BatchOutcome("b1", "b", 1_000, deadline_s=86_400.0), 0.0, 100.0)
    load = PoolLoad("p", 10_000_000, 0, 0, 0, 0, 0)
    releases = feed.release(load, 0.0, lambda b, n: n * 300)
    # a1's second entry was built at 10 while b1 went, and goes at the 5 left.
    assert [(r.batch.outcome.batch_id, r.requests) for r in releases] == [("a1", 10), ("b1", 10), ("a1", 5)]
    assert feed.inflight_requests == 25


def test_a_head_is_asked_for_only_while_it_may_be_released() -> None:
    """The exact mode draws an entry's lengths the first time its lease is asked for, so a pass
    must ask for the heads it offers and no more: not the next head of a batch once the room is
    spent (an extra draw would shift every draw after it, and the run with them)."""
    feed = BulkFeed(RoomPolicy(0.0, max_inflight_requests=2), ReleaseOrder({"a": 1.0}), DeadlineRisk(), 1)
    feed.add(BatchOutcome("a1", "a", 100, deadline_s=86_400.0), 0.0, 100.0)
    asked: list[tuple[str, int]] = []

    def head(batch: SimBatch, requests: int) -> int:
        key = (batch.outcome.batch_id, batch.released)
        if key not in asked:
            asked.append(key)
        return 100 * requests

    releases = feed.release(PoolLoad("p", 10_000_000, 0, 0, 0, 0, 0), 0.0, head)
    assert [r.first for r in releases] == [0, 1]
    assert asked == [("a1", 0), ("a1", 1)]
    closed = PoolLoad("p", 10_000_000, 0, 0, 0, interactive_waiting=1)  # people wait: no room
    assert feed.release(closed, 1.0, head) == []
    assert asked == [("a1", 0), ("a1", 1)]
