"""Admission by tier against a real redis-server (docs/tiers.md): priority waiters ahead of
interactive ones, flex only on room the higher tiers leave, a bounded wait then a 429 that
says capacity is unavailable for flex."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import partial

import pytest
import redis.asyncio as aioredis

from config.settings import QuotaSpec, TeamSpec, load_config
from contracts.service_tier import FLEX_CAPACITY_UNAVAILABLE
from quota.admission import Admission, AdmissionRefused
from quota.capacity import StaticCapacity

from .test_admission import fill_then_shrink, has_length, queued_is, until

pytestmark = pytest.mark.integration


@pytest.fixture()
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def tiered_admission(client: aioredis.Redis, capacity: StaticCapacity, flex_wait_s: float = 0.3) -> Admission:
    """Teams a (1), b (3), c (4) as test_admission.py has them; a may use priority."""
    teams = {
        "a": TeamSpec(weight=1, tiers={"priority": 1, "default": 1, "flex": 1}),
        "b": TeamSpec(weight=3),
        "c": TeamSpec(weight=4),
    }
    quota = QuotaSpec(queue_timeout_s=5.0, flex_wait_s=flex_wait_s)
    config = load_config().model_copy(update={"teams": teams, "quota": quota})
    return Admission(config, client, capacity, queue_poll_s=0.05)


async def test_a_priority_waiter_is_admitted_ahead_of_interactive_ones_queued_before_it(
    client: aioredis.Redis,
) -> None:
    capacity = StaticCapacity({"small": 16_000})
    admission = tiered_admission(client, capacity)
    c_leases = await fill_then_shrink(admission, capacity, 80, 100)
    order: list[str] = []

    async def ask(name: str, request_class: str) -> None:
        await admission.admit(name[0], "small", 100, request_class)  # type: ignore[arg-type]
        order.append(name)

    tasks = []
    for name, request_class in (("b1", "interactive"), ("b2", "interactive"), ("a1", "priority")):
        tasks.append(asyncio.create_task(ask(name, request_class)))
        await until(partial(queued_is, admission, len(tasks)))
    for served, lease in enumerate(c_leases[:3], start=1):
        await admission.release(lease)
        await until(partial(has_length, order, served))
    await asyncio.gather(*tasks)
    assert order == ["a1", "b1", "b2"]  # b's weight (3) counts only inside its own tier


async def test_flex_runs_on_idle_room_at_its_full_size(client: aioredis.Redis) -> None:
    capacity = StaticCapacity({"small": 10_000})
    admission = tiered_admission(client, capacity)
    lease = await admission.admit("a", "small", 1_000, "flex")
    assert lease.tokens == 1_000  # not bulk's lease fraction: it holds what it asked for
    assert not lease.borrowed  # within a's share of the idle pool


async def test_flex_waits_a_bounded_time_then_429_with_its_code_and_retry_after(client: aioredis.Redis) -> None:
    capacity = StaticCapacity({"small": 2_000})
    admission = tiered_admission(client, capacity, flex_wait_s=0.3)
    await fill_then_shrink(admission, capacity, 1, 1_000)  # the pool is c's, full
    started = time.monotonic()
    with pytest.raises(AdmissionRefused) as refused:
        await admission.admit("b", "small", 100, "flex")
    assert 0.3 <= time.monotonic() - started < 2.0
    assert refused.value.status == 429 and refused.value.code == FLEX_CAPACITY_UNAVAILABLE
    assert refused.value.retry_after_s is not None and refused.value.retry_after_s >= 1
    assert "flex" in refused.value.message
    assert admission.snapshot()["small"].queued == {}


async def test_flex_is_not_admitted_while_a_higher_tier_waits_even_where_it_would_fit(
    client: aioredis.Redis,
) -> None:
    capacity = StaticCapacity({"small": 1_800})
    admission = tiered_admission(client, capacity, flex_wait_s=0.2)
    await fill_then_shrink(admission, capacity, 1, 900)
    capacity.set("small", 1_000)  # 100 tokens free
    waiting = asyncio.create_task(admission.admit("b", "small", 300, "interactive"))  # waits for 300
    await until(lambda: admission.snapshot()["small"].queued == {"b": 1})
    with pytest.raises(AdmissionRefused) as refused:
        await admission.admit("a", "small", 100, "flex")  # 100 would fit: the room is b's to wait for
    assert refused.value.code == FLEX_CAPACITY_UNAVAILABLE
    # The same 100 tokens at the default tier are admitted (within a's share), as before tiers.
    assert not (await admission.admit("a", "small", 100, "interactive")).borrowed
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_flex_at_a_zero_wait_is_refused_at_once(client: aioredis.Redis) -> None:
    capacity = StaticCapacity({"small": 2_000})
    admission = tiered_admission(client, capacity, flex_wait_s=0.0)
    await fill_then_shrink(admission, capacity, 1, 1_000)
    started = time.monotonic()
    with pytest.raises(AdmissionRefused) as refused:
        await admission.admit("b", "small", 100, "flex")
    assert time.monotonic() - started < 1.0
    assert refused.value.status == 429 and refused.value.code == FLEX_CAPACITY_UNAVAILABLE


async def test_a_teams_own_flex_and_bulk_never_refuse_its_priority_and_interactive_requests(
    client: aioredis.Redis,
) -> None:
    """The engine preempts flex and bulk for people: a team whose background work fills its
    share is still admitted for its people's requests (it was a 429 `refuse_team`)."""
    capacity = StaticCapacity({"small": 8_000})
    admission = tiered_admission(client, capacity)
    await admission.admit("c", "small", 100, "interactive")  # another team wants room: shares apply
    background = [await admission.admit("a", "small", 400, "flex") for _ in range(2)]
    background.append(await admission.admit("a", "small", 200, "bulk"))
    assert all(lease.preemptible and not lease.borrowed for lease in background)
    assert [lease.flex for lease in background] == [True, True, False]
    # a's static share is 8,000 x 1/8 = 1,000: its flex and bulk fill it. People's requests
    # still get in, owned, as if the background work were not there.
    for request_class in ("priority", "interactive"):
        lease = await admission.admit("a", "small", 500, request_class)  # type: ignore[arg-type]
        assert not lease.borrowed and not lease.preemptible
    # Its flex counts all of it: beyond its share, more flex only borrows idle room (and is as
    # preemptible as the rest of its flex).
    assert (await admission.admit("a", "small", 400, "flex")).borrowed
    loads = (await admission.refresh_snapshot())["small"].leases
    assert (loads["a"].priority_tokens, loads["a"].owned_tokens) == (500, 500)
    assert (loads["a"].flex_tokens, loads["a"].preemptible_tokens) == (1_200, 200)  # flex's own kind; bulk's


async def test_priority_goes_ahead_of_its_teams_default_work_within_its_own_share(client: aioredis.Redis) -> None:
    """A team whose default replies fill its share is still admitted for priority, up to a share
    of priority work; a priority flood is held to that share, and its default work to its own."""
    capacity = StaticCapacity({"small": 8_000})
    admission = tiered_admission(client, capacity)
    await admission.admit("c", "small", 100, "interactive")  # another team wants room: shares apply
    for _ in range(2):
        assert not (await admission.admit("a", "small", 500, "interactive")).borrowed  # a's 1,000
    urgent = await admission.admit("a", "small", 1_000, "priority")
    assert urgent.priority and not urgent.borrowed
    # Beyond the priority share (1,600 while c wants room) the flood only borrows idle room ...
    assert (await admission.admit("a", "small", 700, "priority")).borrowed
    # ... and a's default work is held to its share as before (its priority counts there):
    # beyond it, it too only borrows idle room.
    assert (await admission.admit("a", "small", 700, "interactive")).borrowed


async def test_flex_does_not_count_its_teams_batch_against_its_share(client: aioredis.Redis) -> None:
    """The engine preempts bulk for flex: a team whose batch fills its share still runs flex
    within the share, as a flex tier of its own weight would."""
    capacity = StaticCapacity({"small": 8_000})
    admission = tiered_admission(client, capacity)
    await admission.admit("c", "small", 100, "interactive")  # another team wants room: shares apply
    await admission.admit("a", "small", 1_000, "bulk")  # a's static share, all batch
    lease = await admission.admit("a", "small", 500, "flex")
    assert lease.flex and not lease.borrowed  # within the share: its bulk gives way
