"""The simulated dispatcher releases what the room holds and no more, as the live one does."""

from __future__ import annotations

from bulk.release_policy import DeadlineRisk, PoolLoad, ReleaseOrder, RoomPolicy
from fleet.sim.bulk_feed import BulkFeed
from fleet.sim.recorder import BatchOutcome


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
