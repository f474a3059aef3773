"""The event queue: time order, push order at equal times, follow-ups, the clock."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from simulator.events import Event, EventQueue


class Log:
    def __init__(self) -> None:
        self.seen: list[tuple[float, str]] = []


class Mark(Event[Log]):
    def __init__(self, time: float, name: str, then: list[Event[Log]] | None = None) -> None:
        super().__init__(time)
        self.name = name
        self.then = then or []

    def handle(self, world: Log) -> Iterable[Event[Log]]:
        world.seen.append((self.time, self.name))
        return self.then


def test_events_run_in_time_order_and_push_order_at_equal_times() -> None:
    queue: EventQueue[Log] = EventQueue()
    log = Log()
    for event in [Mark(2.0, "c"), Mark(1.0, "a"), Mark(2.0, "d"), Mark(1.0, "b")]:
        queue.push(event)
    queue.run_until(log, 10.0)
    assert log.seen == [(1.0, "a"), (1.0, "b"), (2.0, "c"), (2.0, "d")]


def test_follow_ups_are_queued_and_the_clock_stops_at_the_end() -> None:
    queue: EventQueue[Log] = EventQueue()
    log = Log()
    queue.push(Mark(1.0, "first", then=[Mark(1.0, "same-time"), Mark(5.0, "later"), Mark(20.0, "after-end")]))
    queue.run_until(log, 10.0)
    assert log.seen == [(1.0, "first"), (1.0, "same-time"), (5.0, "later")]
    assert queue.now == 10.0
    assert len(queue) == 1  # the 20 s event waits for a later run_until
    assert queue.num_handled == 3


def test_an_event_in_the_past_is_refused() -> None:
    queue: EventQueue[Log] = EventQueue()
    queue.run_until(Log(), 5.0)
    with pytest.raises(ValueError, match="before now"):
        queue.push(Mark(4.0, "late"))
