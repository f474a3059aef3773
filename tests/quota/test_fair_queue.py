"""FairQueue: weighted fair order of waiters, kicks that wake only the head, bounded waits."""

from __future__ import annotations

import asyncio
import time

from quota.fair_queue import FairOrder, FairQueue


def test_tags_advance_per_team_by_tokens_over_weight() -> None:
    order = FairOrder()
    assert order.tag("a", 400, 1.0) == (0.0, 400.0)
    assert order.tag("b", 400, 2.0) == (0.0, 200.0)
    assert order.tag("b", 400, 2.0) == (200.0, 400.0)
    assert order.tag("a", 400, 1.0) == (400.0, 800.0)
    order.served(200.0)
    assert order.virtual_time == 200.0
    # A team that was idle starts at virtual time, not at zero: no credit for idling.
    assert order.tag("c", 100, 1.0) == (200.0, 300.0)


def test_a_withdrawn_request_does_not_charge_its_team() -> None:
    order = FairOrder()
    start, finish = order.tag("a", 1000, 1.0)
    order.withdrawn("a", start, finish)
    assert order.tag("a", 10, 1.0) == (0.0, 10.0)


def test_head_order_follows_finish_tags_then_arrival() -> None:
    queue = FairQueue()
    a1 = queue.join("a", 400, 1.0)
    a2 = queue.join("a", 400, 1.0)
    b1 = queue.join("b", 400, 2.0)
    b2 = queue.join("b", 400, 2.0)
    assert queue.lengths() == {"a": 2, "b": 2}
    served = []
    while (head := queue.head()) is not None:
        served.append(head)
        head.leave(served=True)
    assert served == [b1, a1, b2, a2]
    assert len(queue) == 0


def test_a_light_team_is_not_stuck_behind_a_heavy_teams_flood() -> None:
    queue = FairQueue()
    flood = [queue.join("heavy", 1000, 4.0) for _ in range(10)]  # finishes 250, 500, ... 2500
    light = queue.join("light", 200, 1.0)  # finish 200: goes first
    assert queue.head() is light
    light.leave(served=True)
    assert queue.head() is flood[0]


async def test_kick_wakes_the_head_only_and_leaving_passes_the_turn() -> None:
    queue = FairQueue()
    first = queue.join("a", 100, 1.0)  # lands at the head: kicked so it tries at once
    second = queue.join("a", 100, 1.0, kick=False)
    started = time.monotonic()
    await first.wait(5.0)
    assert time.monotonic() - started < 0.5
    assert first.is_head and not second.is_head

    second_woke = asyncio.create_task(second.wait(5.0))
    await asyncio.sleep(0.02)
    queue.kick()  # room freed: only the head hears it
    await first.wait(5.0)
    assert not second_woke.done()
    first.leave(served=True)  # the next waiter's turn: kicked
    await asyncio.wait_for(second_woke, 1.0)
    assert second.is_head


async def test_wait_returns_after_its_timeout_without_a_kick() -> None:
    queue = FairQueue()
    queue.join("a", 100, 1.0, kick=False)
    behind = queue.join("b", 1000, 1.0)
    started = time.monotonic()
    await behind.wait(0.05)
    assert 0.04 < time.monotonic() - started < 0.5
    assert not behind.is_head
    behind.leave(served=False)
    behind.leave(served=False)  # twice is harmless
    assert queue.lengths() == {"a": 1}


async def test_a_kick_while_the_head_is_busy_is_not_lost() -> None:
    queue = FairQueue()
    head = queue.join("a", 100, 1.0, kick=False)
    queue.kick()  # arrives while the head is still trying to reserve
    started = time.monotonic()
    await head.wait(5.0)
    assert time.monotonic() - started < 0.5
