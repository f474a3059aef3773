"""LeaseStore against a real redis-server: share maths, lazy reclaim, renew, release, waiters,
and the Lua script agreeing with SharePolicy on random states."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from quota.leases import Lease, LeaseStore, WaiterMark
from quota.shares import Decision, SharePolicy, ShareRequest, TeamLimits, TeamLoad
from quota.usage import day_key

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 4, 12, 0, tzinfo=UTC).timestamp()
WEIGHTS = {"a": 1.0, "b": 3.0, "c": 4.0}


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def store_for(client: aioredis.Redis, clock: FakeClock, limits: dict[str, TeamLimits] | None = None) -> LeaseStore:
    return LeaseStore(client, SharePolicy(WEIGHTS, limits), clock)


async def test_share_maths_with_three_teams_through_redis(client: aioredis.Redis) -> None:
    clock = FakeClock()
    store = store_for(client, clock)

    async def reserve(team: str, tokens: int, interactive: bool = True) -> Decision:
        outcome = await store.reserve(team, "small", tokens, 30, capacity_tokens=8000, interactive=interactive)
        return outcome.decision.decision

    # Static shares (8,000 x weight / 8): a 1,000, b 3,000, c 4,000.
    assert await reserve("c", 4000) is Decision.ADMIT
    assert await reserve("a", 1000) is Decision.ADMIT
    lent = await store.reserve("a", "small", 600, 30, capacity_tokens=8000)
    # Beside c (b idle) a's share is 1,600; the 600 above its static share are b's, lent.
    assert (lent.decision.decision, lent.decision.share_tokens) == (Decision.BORROW, 1600.0)
    assert lent.lease is not None and lent.lease.borrowed
    assert await store.loads("small") == {"a": TeamLoad(1000, 600), "c": TeamLoad(4000)}
    # b returns for its static share: as bulk it needs unleased room (2,400); as interactive it
    # takes the room a borrowed (the engine preempts a's bulk-priority work).
    assert await reserve("b", 3000, interactive=False) is Decision.FLEET_FULL
    assert await reserve("b", 3000) is Decision.ADMIT
    refused = await store.reserve("a", "small", 1, 30, capacity_tokens=8000)
    assert (refused.decision.decision, refused.decision.share_tokens) == (Decision.REFUSE_TEAM, 1000.0)
    assert refused.decision.retry_after_s == 30  # its leases end with their TTL (no expected_s given)
    assert await reserve("c", 1) is Decision.REFUSE_TEAM  # every share is taken: nothing to lend
    assert await store.loads("small") == {"a": TeamLoad(1000, 600), "b": TeamLoad(3000), "c": TeamLoad(4000)}


async def test_a_lone_team_borrows_beyond_its_static_share_and_a_returning_team_takes_that_room(
    client: aioredis.Redis,
) -> None:
    """S9's shape: a floods while alone; b's interactive requests are admitted into a's
    borrowed room at once, within b's own (static) share."""
    store = store_for(client, FakeClock())
    flood = [await store.reserve("a", "small", 1000, 30, capacity_tokens=8000) for _ in range(8)]
    assert [o.decision.share_tokens for o in flood] == [8000.0] * 8  # alone: the whole pool is its share
    assert [o.lease.borrowed for o in flood if o.lease is not None] == [False] + [True] * 7
    assert (await store.reserve("a", "small", 1, 30, capacity_tokens=8000)).decision.decision is Decision.REFUSE_TEAM
    assert await store.loads("small") == {"a": TeamLoad(1000, 7000)}
    b = await store.reserve("b", "small", 3000, 30, capacity_tokens=8000)
    assert b.decision.decision is Decision.ADMIT
    assert b.lease is not None and not b.lease.borrowed
    assert await store.loads("small") == {"a": TeamLoad(1000, 7000), "b": TeamLoad(3000)}
    # Bulk work waits for unleased room: the engine would not preempt a's bulk work for it.
    bulk = await store.reserve("b", "small", 1, 30, capacity_tokens=8000, interactive=False)
    assert bulk.decision.decision is Decision.FLEET_FULL


async def test_borrowed_leases_are_marked_and_give_way_to_interactive_owners(client: aioredis.Redis) -> None:
    clock = FakeClock()
    store = store_for(client, clock)
    await store.reserve("c", "small", 100, 30, capacity_tokens=8000)
    # a's share beside c is 1,600: its static 1,000 is its own; the 500 above it and the 4,000
    # beyond its share are borrowed.
    own = await store.reserve("a", "small", 1000, 30, capacity_tokens=8000)
    lent = await store.reserve("a", "small", 500, 30, capacity_tokens=8000)
    borrowed = await store.reserve("a", "small", 4000, 30, capacity_tokens=8000)
    assert own.lease is not None and not own.lease.borrowed
    assert lent.lease is not None and lent.lease.borrowed
    assert borrowed.lease is not None and borrowed.lease.borrowed
    assert await store.loads("small") == {"a": TeamLoad(1000, 4500), "c": TeamLoad(100)}
    # b (share 3,000) takes room a borrowed, as interactive; not as bulk.
    bulk = await store.reserve("b", "small", 3000, 30, capacity_tokens=8000, interactive=False)
    assert bulk.decision.decision is Decision.FLEET_FULL
    interactive = await store.reserve("b", "small", 3000, 30, capacity_tokens=8000)
    assert interactive.decision.decision is Decision.ADMIT


async def test_expired_leases_are_reclaimed_by_the_next_script(client: aioredis.Redis) -> None:
    clock = FakeClock()
    store = store_for(client, clock, {"a": TeamLimits(max_inflight_tokens=1000)})
    await store.reserve("a", "small", 700, 10, capacity_tokens=1000)
    await store.reserve("a", "large", 300, 20, capacity_tokens=1000)
    refused = await store.reserve("a", "small", 1, 10, capacity_tokens=1000)
    assert refused.decision.decision is Decision.REFUSE_LIMIT  # 1,000 in flight across both pools
    assert refused.decision.retry_after_s == 10
    clock.now = T0 + 10.0  # expires_at <= now: gone
    assert await store.in_use("small") == {}
    assert await store.in_use("large") == {"a": 300}  # reclaimed leases of every pool go at once
    assert (await store.reserve("a", "large", 700, 10, capacity_tokens=1000)).lease is not None
    assert await client.hgetall("sy:team_inflight") == {b"a": b"1000"}


async def test_renew_extends_and_restores_a_reclaimed_lease(client: aioredis.Redis) -> None:
    clock = FakeClock()
    store = store_for(client, clock)
    lease = (await store.reserve("b", "small", 400, 10, capacity_tokens=1000)).lease
    other = (await store.reserve("a", "large", 100, 10, capacity_tokens=1000)).lease
    assert lease is not None and other is not None and lease.expires_at == T0 + 10
    clock.now = T0 + 8
    await store.renew([lease, other], 10)  # every lease of a process, of any pool, in one call
    clock.now = T0 + 15
    assert await store.in_use("small") == {"b": 400}
    assert await store.in_use("large") == {"a": 100}
    clock.now = T0 + 30  # the holder stalled: reclaimed...
    assert await store.in_use("small") == {}
    await store.renew([lease], 10)  # ...but its request still runs: counted again
    clock.now = T0 + 39
    assert await store.in_use("small") == {"b": 400}
    assert await store.release(lease) is True
    assert await store.in_use("small") == {}
    await store.renew([], 10)  # nothing held: no call


async def test_release_is_idempotent(client: aioredis.Redis) -> None:
    store = store_for(client, FakeClock())
    lease = (await store.reserve("a", "small", 250, 30, capacity_tokens=1000)).lease
    assert lease is not None
    assert await store.release(lease) is True
    assert await store.release(lease) is False
    assert await store.release(Lease("never-taken", "a", "small", 250, False, T0)) is False
    assert await store.in_use("small") == {}
    assert await client.keys("sy:*") == []  # nothing left behind


async def test_waiter_marks_stop_other_teams_borrowing_until_they_expire(client: aioredis.Redis) -> None:
    clock = FakeClock()
    store = store_for(client, clock)
    await store.reserve("c", "small", 900, 30, capacity_tokens=2000)  # within c's static 1,000: owned
    # Then servers went: 1,000 tokens are left, 900 of them c's. b's share beside c is 428.
    mark = WaiterMark("w1", T0 + 5)
    waiting = await store.reserve("b", "small", 300, 30, capacity_tokens=1000, waiter=mark)
    assert waiting.decision.decision is Decision.FLEET_FULL
    assert (await store.loads("small"))["b"] == TeamLoad(waiters=1)
    # The same waiter trying again is still one waiter.
    await store.reserve("b", "small", 300, 30, capacity_tokens=1000, waiter=mark)
    assert (await store.loads("small"))["b"] == TeamLoad(waiters=1)
    # c is over its share (571) and b waits: refused, though 100 tokens are free.
    assert (await store.reserve("c", "small", 50, 30, capacity_tokens=1000)).decision.decision is Decision.REFUSE_TEAM
    clock.now = T0 + 5
    assert "b" not in await store.loads("small")  # b's wait is over: c is alone again and borrows
    assert (await store.reserve("c", "small", 50, 30, capacity_tokens=1000)).decision.decision is Decision.BORROW
    # unwait clears a mark at once; an admission clears its own waiter's mark. (a's share beside
    # c is 200; 100 tokens are free.)
    await store.reserve("a", "small", 150, 30, capacity_tokens=1000, waiter=WaiterMark("w2", T0 + 60))
    assert (await store.loads("small"))["a"] == TeamLoad(waiters=1)
    await store.unwait("small", "w2")
    assert "a" not in await store.loads("small")
    await store.reserve("a", "small", 150, 30, capacity_tokens=1000, waiter=WaiterMark("w3", T0 + 60))
    assert (await store.loads("small"))["a"] == TeamLoad(waiters=1)
    await store.reserve("a", "small", 150, 30, capacity_tokens=2000, waiter=WaiterMark("w3", T0 + 60))
    assert (await store.loads("small"))["a"] == TeamLoad(owned_tokens=150)


async def test_tokens_per_day_counts_metered_usage_and_leases_in_flight(client: aioredis.Redis) -> None:
    clock = FakeClock()
    store = store_for(client, clock, {"a": TeamLimits(tokens_per_day=5000)})
    await client.set(day_key("a", datetime.fromtimestamp(T0, UTC)), 4000)
    assert (await store.reserve("a", "small", 600, 30, capacity_tokens=8000)).lease is not None
    refused = await store.reserve("a", "small", 600, 30, capacity_tokens=8000)
    assert (refused.decision.decision, refused.decision.retry_after_s) == (Decision.REFUSE_LIMIT, 30)
    await client.set(day_key("a", datetime.fromtimestamp(T0, UTC)), 4900)
    refused = await store.reserve("a", "small", 200, 30, capacity_tokens=8000)
    assert refused.decision.retry_after_s == 12 * 3600  # T0 is noon UTC: until midnight
    assert refused.usage.tokens_today == 4900


# Lease.kind
KIND = {"owned_tokens": 0, "borrowed_tokens": 1, "preemptible_tokens": 2, "priority_tokens": 3, "flex_tokens": 4}


async def test_script_agrees_with_share_policy_on_random_states(client: aioredis.Redis) -> None:
    """Random reserves, releases, expiries and waiters: each decision the script applied is the
    one SharePolicy takes on the state the script saw, and that state is what was leased."""
    rng = random.Random(7)
    clock = FakeClock()
    limits = {"a": TeamLimits(max_inflight_tokens=3000), "c": TeamLimits(tokens_per_day=20_000)}
    store = store_for(client, clock, limits)
    policy = SharePolicy(WEIGHTS, limits)
    held: dict[str, Lease] = {}
    seen: set[Decision | str] = set()
    for step in range(400):
        clock.now += rng.uniform(0, 0.5)
        if held and rng.random() < 0.3:
            lease = held.pop(rng.choice(sorted(held)))
            await store.release(lease)
            continue
        team = rng.choice("abc")
        interactive = rng.random() < 0.7
        priority = interactive and rng.random() < 0.3
        flex = not interactive and rng.random() < 0.5
        tokens = rng.randint(1, 1500)
        capacity = rng.choice([4000, 6000, 8000])
        mark = WaiterMark(f"w{step}", clock.now + rng.uniform(0, 3)) if interactive and rng.random() < 0.3 else None
        outcome = await store.reserve(
            team, "small", tokens, rng.uniform(1, 20), capacity_tokens=capacity, interactive=interactive,
            priority=priority, flex=flex, waiter=mark,
        )  # fmt: skip
        held = {lid: lease for lid, lease in held.items() if lease.expires_at > clock.now}
        for kind in KIND:
            by_team = {
                t: sum(x.tokens for x in held.values() if x.team_id == t and x.kind == KIND[kind]) for t in "abc"
            }
            assert {t: getattr(load, kind) for t, load in outcome.pool.loads.items() if getattr(load, kind)} == {
                t: n for t, n in by_team.items() if n
            }, kind
        expected = policy.decide(
            ShareRequest(team, tokens, interactive, priority, flex), outcome.pool, outcome.usage, clock.now
        )
        assert outcome.decision == expected
        seen.add(expected.decision)
        weight, total = policy.share_weight(team, outcome.pool)
        in_use = outcome.pool.loads.get(team, TeamLoad()).in_use
        if expected.decision is Decision.BORROW and (in_use + tokens) * total <= capacity * weight:
            seen.add("borrow within share")  # beyond the static share only
        if outcome.lease is not None:
            held[outcome.lease.lease_id] = outcome.lease
        if outcome.lease is not None and outcome.lease.preemptible:
            seen.add("preemptible")
        if outcome.lease is not None and outcome.lease.priority:
            seen.add("priority")
        if outcome.lease is not None and outcome.lease.flex:
            seen.add("flex")
        if interactive and expected.decision.admitted and outcome.pool.loads.get(team, TeamLoad()).preemptible_tokens:
            seen.add("owner beside its team's preemptible work")
    decisions = {Decision.ADMIT, Decision.BORROW, Decision.REFUSE_TEAM, Decision.REFUSE_LIMIT, Decision.FLEET_FULL}
    assert seen == decisions | {
        "borrow within share",
        "preemptible",
        "owner beside its team's preemptible work",
        "priority",
        "flex",
    }


async def test_script_and_policy_sum_the_weights_in_the_same_order(
    client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """On a boundary where the order of summing the weights decides: 1,000 x (0.1 + 0.2 + 0.3)
    is over 2,000 x 0.3 summed left to right, and not summed right to left."""
    weights = {"a": 0.1, "b": 0.2, "c": 0.3}
    assert 1000 * (0.1 + 0.2 + 0.3) > 2000 * 0.3 >= 1000 * (0.3 + 0.2 + 0.1)
    store = LeaseStore(client, SharePolicy(weights), FakeClock())
    outcome = await store.reserve("c", "small", 1000, 30, capacity_tokens=2000)
    expected = SharePolicy(weights).decide(ShareRequest("c", 1000, True), outcome.pool, outcome.usage, T0)
    assert outcome.decision == expected
    assert expected.decision is Decision.BORROW
    assert "disagree" not in caplog.text
