"""Discrete events on one heap, vidur's way: each event is a small object whose handler returns
the events it causes; the queue orders them by (time, sequence number).

The sequence number is the tie-break that makes a run reproducible: two events at the same
instant run in the order they were pushed, never in an order that depends on the events'
contents or on hashing, so the same seed gives the same run.

    push(e) ─▶ heap[(time, seq, e)] ─▶ pop smallest ─▶ e.handle(world) ─▶ push(follow-ups)
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Generic, TypeVar

W = TypeVar("W")


class Event(ABC, Generic[W]):
    """Something that happens at `time` (simulated seconds) to a world of type W."""

    __slots__ = ("time",)

    def __init__(self, time: float) -> None:
        self.time = time

    @abstractmethod
    def handle(self, world: W) -> Iterable[Event[W]]:
        """Apply the event to `world`; return the events it causes (at `time` or later)."""


class EventQueue(Generic[W]):
    """The simulation's agenda: a heap of events ordered by (time, push order)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Event[W]]] = []
        self._seq = 0
        self.now = 0.0
        self.num_handled = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, event: Event[W]) -> None:
        if event.time < self.now:
            raise ValueError(f"event {type(event).__name__} at {event.time} is before now ({self.now})")
        heapq.heappush(self._heap, (event.time, self._seq, event))
        self._seq += 1

    def run_until(self, world: W, end: float) -> None:
        """Handle events in order until the next one is after `end`; the clock then reads `end`."""
        heap = self._heap
        while heap and heap[0][0] <= end:
            time, _, event = heapq.heappop(heap)
            self.now = time
            self.num_handled += 1
            for follow_up in event.handle(world):
                self.push(follow_up)
        self.now = max(self.now, end)
