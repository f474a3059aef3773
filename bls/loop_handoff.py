"""Outputs from the engine host's sender thread to the replies' asyncio queues, one wake of the
event loop for all the outputs of a pass instead of one per output.

    sender thread (one pass, outputs of one engine step)         event loop
    ────────────────────────────────────────────────────         ──────────
    put(q1, o1) ─ first pending: call_soon_threadsafe(drain) ──▶ drain(): q1 ← o1
    put(q2, o2) ─ appended                                                 q2 ← o2
    put(q3, o3) ─ appended                                                 q3 ← o3

`call_soon_threadsafe` writes to the loop's self-pipe on every call: a system call on the
sender's side and, while the loop sleeps in `epoll_wait`, a wake-up of its thread, for each
response of each reply (issue 41: the `llm` stub's share of the relay). Here only the first
output after a drain schedules one; the ones that follow before the loop has run it ride along.
The sender keeps the GIL through a pass (a few hundred microseconds, far under the
interpreter's 5 ms switch interval), so a pass's outputs reach the loop in one wake.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Generic, TypeVar

_T = TypeVar("_T")


class LoopHandoff(Generic[_T]):
    """Items for asyncio queues of one event loop, put from any thread, delivered in batches."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue[_T], _T]] = []

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def put(self, queue: asyncio.Queue[_T], item: _T) -> None:
        """Hand `item` to `queue` on the loop; wakes the loop only when nothing is pending yet."""
        with self._lock:
            wake = not self._pending
            self._pending.append((queue, item))
        if wake:
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: what is pending will never be read
                with self._lock:
                    self._pending.clear()
                raise

    def _drain(self) -> None:
        """On the loop: every pending item into its queue, in the order they were put."""
        with self._lock:
            pending, self._pending = self._pending, []
        for queue, item in pending:
            queue.put_nowait(item)
