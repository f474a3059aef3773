"""LoopHandoff: a pass's outputs reach their queues in one wake of the loop, in order."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from bls.loop_handoff import LoopHandoff


class CountingLoop:
    """The running loop, counting `call_soon_threadsafe` (one self-pipe write, one wake each)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.wakes = 0

    def call_soon_threadsafe(self, callback: Callable[..., Any], *args: Any) -> asyncio.Handle:
        self.wakes += 1
        return self._loop.call_soon_threadsafe(callback, *args)


def in_thread(work: Callable[[], None]) -> None:
    thread = threading.Thread(target=work)
    thread.start()
    thread.join(30)


async def test_a_pass_of_outputs_wakes_the_loop_once_and_each_queue_gets_its_own() -> None:
    loop = CountingLoop(asyncio.get_running_loop())
    handoff: LoopHandoff[int] = LoopHandoff(loop)  # type: ignore[arg-type]
    queues: list[asyncio.Queue[int]] = [asyncio.Queue() for _ in range(12)]

    def one_pass(step: int) -> None:
        for i, queue in enumerate(queues):
            handoff.put(queue, 100 * step + i)

    in_thread(lambda: one_pass(1))
    got = [await asyncio.wait_for(queue.get(), 30) for queue in queues]
    assert got == [100 + i for i in range(12)]
    assert loop.wakes == 1  # twelve outputs, one wake (was one call_soon_threadsafe each)

    in_thread(lambda: one_pass(2))  # the next pass wakes it again
    got = [await asyncio.wait_for(queue.get(), 30) for queue in queues]
    assert got == [200 + i for i in range(12)]
    assert loop.wakes == 2


async def test_items_for_one_queue_keep_their_order_across_wakes() -> None:
    handoff: LoopHandoff[int] = LoopHandoff(asyncio.get_running_loop())
    queue: asyncio.Queue[int] = asyncio.Queue()
    in_thread(lambda: [handoff.put(queue, i) for i in range(5)])
    await asyncio.sleep(0)
    in_thread(lambda: [handoff.put(queue, i) for i in range(5, 8)])
    assert [await asyncio.wait_for(queue.get(), 30) for _ in range(8)] == list(range(8))


def test_a_closed_loop_is_an_error_at_once_and_leaves_nothing_pending() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    handoff: LoopHandoff[int] = LoopHandoff(loop)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for _ in range(2):  # not only the first put: nothing stays pending to swallow the second
        with pytest.raises(RuntimeError):
            handoff.put(queue, 1)
