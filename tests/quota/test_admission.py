"""Admission against a real redis-server: leases, 429/413/503 with Retry-After, the fair queue
(woken by releases, capacity changes and polling), renewal."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from functools import partial

import pytest
import redis.asyncio as aioredis

from config.settings import QuotaSpec, SwitchyardConfig, TeamSpec, load_config
from quota.admission import Admission, AdmissionRefused
from quota.capacity import StaticCapacity
from quota.leases import Lease
from quota.shares import Decision, TeamLoad

pytestmark = pytest.mark.integration


def make_config(
    queue_timeout_s: float = 2.0, lease_ttl_s: float = 30.0, a_inflight: int | None = None
) -> SwitchyardConfig:
    teams = {
        "a": TeamSpec(weight=1, max_inflight_tokens=a_inflight),
        "b": TeamSpec(weight=3),
        "c": TeamSpec(weight=4),
    }
    quota = QuotaSpec(lease_ttl_s=lease_ttl_s, queue_timeout_s=queue_timeout_s)
    return load_config().model_copy(update={"teams": teams, "quota": quota})


@pytest.fixture()
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def admission_for(
    client: aioredis.Redis,
    capacity: StaticCapacity,
    poll_s: float = 0.05,
    queue_timeout_s: float = 2.0,
    lease_ttl_s: float = 30.0,
    a_inflight: int | None = None,
) -> Admission:
    config = make_config(queue_timeout_s, lease_ttl_s, a_inflight)
    return Admission(config, client, capacity, queue_poll_s=poll_s)


async def fill(admission: Admission, team: str, leases: int, tokens: int) -> list[Lease]:
    return [await admission.admit(team, "small", tokens, "interactive") for _ in range(leases)]


async def fill_then_shrink(admission: Admission, capacity: StaticCapacity, leases: int, tokens: int) -> list[Lease]:
    """c takes `leases` x `tokens` within its static share (owned), then servers go until the
    owned leases fill the pool. Only a shrinking pool leaves an interactive request within its
    share without room: owned leases stay within static shares, which sum to the capacity."""
    held = await fill(admission, "c", leases, tokens)
    assert not any(lease.borrowed for lease in held)
    capacity.set("small", sum(load.owned_tokens for load in (await admission.store.loads("small")).values()))
    return held


async def until(condition: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def queued_is(admission: Admission, count: int) -> bool:
    return sum(admission.snapshot()["small"].queued.values()) == count


def has_length(items: list[str], count: int) -> bool:
    return len(items) == count


async def test_admit_release_and_snapshot(client: aioredis.Redis) -> None:
    admission = admission_for(client, StaticCapacity({"small": 8000}))
    before = time.time()
    lease = await admission.admit("a", "small", 500, "interactive")
    assert (lease.team_id, lease.pool_id, lease.tokens, lease.borrowed) == ("a", "small", 500, False)
    assert before + 30 <= lease.expires_at <= time.time() + 30
    snap = admission.snapshot()["small"]
    assert (snap.capacity_tokens, snap.leases, snap.queued) == (8000, {"a": TeamLoad(500)}, {})
    await fill(admission, "c", 1, 100)
    borrowed = await admission.admit("a", "small", 1200, "interactive")  # a's share beside c: 1,600
    assert borrowed.borrowed
    assert await admission.release(lease) is True
    assert await admission.release(lease) is False
    await admission.release(borrowed)
    assert (await admission.refresh_snapshot())["small"].leases == {"c": TeamLoad(100)}


async def test_a_flooding_team_borrows_and_a_returning_team_is_admitted_at_once(client: aioredis.Redis) -> None:
    admission = admission_for(client, StaticCapacity({"small": 8000}), poll_s=10.0)
    flood = await fill(admission, "a", 8, 1000)  # alone: its share is the whole pool, 1,000 its own
    assert [lease.borrowed for lease in flood] == [False] + [True] * 7
    started = time.monotonic()
    b_leases = await fill(admission, "b", 3, 1000)  # b's static share, in the room a borrowed
    assert time.monotonic() - started < 0.3  # not queued behind a's flood
    assert not any(lease.borrowed for lease in b_leases)
    with pytest.raises(AdmissionRefused) as refused:
        await admission.admit("a", "small", 1, "interactive")
    assert (refused.value.status, refused.value.decision) == (429, Decision.REFUSE_TEAM)
    assert "share is 2000" in refused.value.message
    assert admission.snapshot()["small"].leases == {"a": TeamLoad(1000, 7000), "b": TeamLoad(3000)}


async def test_over_share_team_gets_429_with_retry_after_from_its_own_leases(client: aioredis.Redis) -> None:
    capacity = StaticCapacity({"small": 8000})
    admission = admission_for(client, capacity, poll_s=10.0)
    a_lease = await admission.admit("a", "small", 1000, "interactive", expected_s=3.0)  # a's static share
    await fill_then_shrink(admission, capacity, 1, 4000)  # c's static share; the pool is now 5,000
    b_waits = asyncio.create_task(admission.admit("b", "small", 1000, "interactive"))  # within share, no room
    await until(lambda: admission.snapshot()["small"].queued == {"b": 1})
    asked = time.monotonic()
    with pytest.raises(AdmissionRefused) as refused:
        await admission.admit("a", "small", 100, "interactive")
    assert time.monotonic() - asked < 0.3  # at once: a refused team never waits in the queue
    error = refused.value
    assert (error.status, error.retry_after_s, error.decision, error.param) == (429, 3, Decision.REFUSE_TEAM, None)
    assert "share is 625" in error.message and "retry after 3 s" in error.message
    released_at = time.monotonic()
    await admission.release(a_lease)  # wakes b's queue at once (polling is 10 s here)
    b_lease = await asyncio.wait_for(b_waits, 1.0)
    assert time.monotonic() - released_at < 0.5
    assert b_lease.tokens == 1000 and not b_lease.borrowed
    assert "b" not in {t for t, load in (await admission.store.loads("small")).items() if load.waiters}


async def test_bulk_never_queues(client: aioredis.Redis) -> None:
    admission = admission_for(client, StaticCapacity({"small": 1000}))
    await fill(admission, "c", 1, 1000)  # borrowed: bulk needs room that no lease holds
    started = time.monotonic()
    with pytest.raises(AdmissionRefused) as refused:
        await admission.admit("b", "small", 100, "bulk")
    assert time.monotonic() - started < 0.3
    assert (refused.value.status, refused.value.decision) == (503, Decision.FLEET_FULL)
    assert refused.value.retry_after_s is not None and refused.value.retry_after_s >= 1


async def test_bulk_leases_its_fraction_of_the_tokens_and_people_all_of_them(client: aioredis.Redis) -> None:
    config = make_config()
    config = config.model_copy(update={"bulk": config.bulk.model_copy(update={"lease_fraction": 0.9})})
    admission = Admission(config, client, StaticCapacity({"small": 8000}))
    bulk = await admission.admit("b", "small", 1001, "bulk")
    person = await admission.admit("b", "small", 1001, "interactive")
    assert (bulk.tokens, person.tokens) == (901, 1001)
    # Bulk within share is preemptible (the engine preempts it for people): counted apart.
    assert (await admission.refresh_snapshot())["small"].leases == {"b": TeamLoad(1001, preemptible_tokens=901)}


async def test_interactive_waits_a_bounded_time_then_503(client: aioredis.Redis) -> None:
    capacity = StaticCapacity({"small": 2000})
    admission = admission_for(client, capacity, queue_timeout_s=0.3)
    await fill_then_shrink(admission, capacity, 1, 1000)
    started = time.monotonic()
    with pytest.raises(AdmissionRefused) as refused:
        await admission.admit("b", "small", 100, "interactive")
    assert 0.3 <= time.monotonic() - started < 1.0
    assert refused.value.status == 503 and refused.value.retry_after_s == 30  # c's lease ends with its TTL
    assert "stayed full for 0.3 s" in refused.value.message
    assert admission.snapshot()["small"].queued == {}
    assert "b" not in await admission.store.loads("small")  # its waiting mark is gone too


async def test_queued_requests_are_admitted_in_weighted_fair_order(client: aioredis.Redis) -> None:
    capacity = StaticCapacity({"small": 16_000})
    admission = admission_for(client, capacity, queue_timeout_s=5.0)
    c_leases = await fill_then_shrink(admission, capacity, 80, 100)  # 8,000, all c's
    order: list[str] = []

    async def ask(name: str) -> None:
        lease = await admission.admit(name[0], "small", 100, "interactive")
        order.append(name)
        assert not lease.borrowed

    tasks = []
    for name in ["a1", "a2", "b1", "b2", "b3"]:  # within their shares (1,000 and 3,000): they wait
        tasks.append(asyncio.create_task(ask(name)))
        await until(partial(queued_is, admission, len(tasks)))
    for served, lease in enumerate(c_leases[:5], start=1):
        await admission.release(lease)
        await until(partial(has_length, order, served))
    await asyncio.gather(*tasks)
    # finish tags: b1 33, b2 67, a1 100 (queued before b3), b3 100, a2 200
    assert order == ["b1", "b2", "a1", "b3", "a2"]


async def test_a_request_that_fits_is_admitted_while_a_larger_one_waits(client: aioredis.Redis) -> None:
    capacity = StaticCapacity({"small": 1800})
    admission = admission_for(client, capacity, poll_s=10.0)
    await fill_then_shrink(admission, capacity, 1, 900)
    capacity.set("small", 1000)  # 100 tokens free
    waiting = asyncio.create_task(admission.admit("b", "small", 300, "interactive"))
    await until(lambda: admission.snapshot()["small"].queued == {"b": 1})
    small = await admission.admit("a", "small", 100, "interactive")  # within a's share (125), and it fits
    assert not small.borrowed
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert admission.snapshot()["small"].queued == {}
    assert "b" not in await admission.store.loads("small")  # a cancelled waiter leaves no mark


async def test_a_capacity_change_wakes_the_queue(client: aioredis.Redis) -> None:
    capacity = StaticCapacity({"small": 2000})
    admission = admission_for(client, capacity, poll_s=10.0)
    await fill_then_shrink(admission, capacity, 1, 1000)
    waiting = asyncio.create_task(admission.admit("b", "small", 300, "interactive"))
    await until(lambda: admission.snapshot()["small"].queued == {"b": 1})
    capacity.set("small", 2000)  # a server became ready again
    lease = await asyncio.wait_for(waiting, 0.5)
    assert lease.tokens == 300 and not lease.borrowed


async def test_a_release_by_another_gateway_is_found_by_polling(client: aioredis.Redis) -> None:
    capacity = StaticCapacity({"small": 2000})
    here, there = admission_for(client, capacity), admission_for(client, capacity)
    (held,) = await fill_then_shrink(there, capacity, 1, 1000)
    waiting = asyncio.create_task(here.admit("b", "small", 300, "interactive"))
    await until(lambda: here.snapshot()["small"].queued == {"b": 1})
    await there.release(held)  # kicks only `there`'s queue
    assert (await asyncio.wait_for(waiting, 0.5)).tokens == 300


async def test_a_request_above_a_hard_limit_is_413(client: aioredis.Redis) -> None:
    admission = admission_for(client, StaticCapacity({"small": 8000}), a_inflight=1000)
    with pytest.raises(AdmissionRefused) as refused:
        await admission.admit("a", "small", 1001, "interactive")
    error = refused.value
    assert (error.status, error.retry_after_s, error.param, error.decision) == (
        413,
        None,
        "max_tokens",
        Decision.TOO_LARGE,
    )
    await admission.admit("a", "small", 800, "bulk")
    with pytest.raises(AdmissionRefused) as refused:
        await admission.admit("a", "small", 201, "interactive")
    assert (refused.value.status, refused.value.decision) == (429, Decision.REFUSE_LIMIT)


async def test_renewing_keeps_leases_alive_until_released(client: aioredis.Redis) -> None:
    # A TTL long enough that renewals (every third of it) survive a busy machine's delays.
    admission = admission_for(client, StaticCapacity({"small": 1000}), lease_ttl_s=1.5)
    first = await admission.admit("b", "small", 100, "interactive")
    second = await admission.admit("a", "small", 50, "interactive")
    async with admission.renewing(first):
        async with admission.renewing(second):
            await asyncio.sleep(3.2)  # two TTLs
            assert await admission.store.in_use("small") == {"b": 100, "a": 50}
        await asyncio.sleep(1.6)  # the first is still renewed, the second no longer
        assert await admission.store.in_use("small") == {"b": 100}
    deadline = asyncio.get_running_loop().time() + 10
    while await admission.store.in_use("small"):  # no longer renewed: reclaimed
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)


async def test_bad_arguments_are_programming_errors(client: aioredis.Redis) -> None:
    admission = admission_for(client, StaticCapacity({"small": 1000}))
    with pytest.raises(ValueError, match="request_class"):
        await admission.admit("a", "small", 10, "batch")
    with pytest.raises(ValueError, match="unknown pool"):
        await admission.admit("a", "tiny", 10, "bulk")
    with pytest.raises(ValueError, match="unknown team"):
        await admission.admit("z", "small", 10, "bulk")
