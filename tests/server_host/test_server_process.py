"""The drain wait of `switchyard triton`, on a fake clock."""

from __future__ import annotations

from collections.abc import Iterator

from server_host.server_process import wait_for_drain


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def readings(*values: int | None) -> Iterator[int | None]:
    yield from values
    while True:
        yield values[-1]


def test_drained_once_empty_for_the_settle_time() -> None:
    clock, seen = Clock(), readings(2, 1, None, 0, 1, 0)  # the 1 after a 0: one arrived late
    drained = wait_for_drain(
        lambda: next(seen), settle_s=1.0, timeout_s=60, abort=lambda: False, clock=clock, sleep=clock.sleep
    )
    assert drained
    # Empty from the 6th poll (t=1.0) on: settled one second later (polls every 0.2 s).
    assert 2.0 - 1e-9 <= clock.now <= 2.2 + 1e-9


def test_times_out_while_requests_run() -> None:
    clock = Clock()
    drained = wait_for_drain(
        lambda: 1, settle_s=1.0, timeout_s=3.0, abort=lambda: False, clock=clock, sleep=clock.sleep
    )
    assert not drained and 3.0 < clock.now < 3.5


def test_unknown_in_flight_never_counts_as_empty() -> None:
    clock = Clock()
    drained = wait_for_drain(
        lambda: None, settle_s=0.0, timeout_s=1.0, abort=lambda: False, clock=clock, sleep=clock.sleep
    )
    assert not drained


def test_abort_cuts_it_short() -> None:
    clock = Clock()
    drained = wait_for_drain(
        lambda: 1, settle_s=1.0, timeout_s=60, abort=lambda: clock.now >= 0.5, clock=clock, sleep=clock.sleep
    )
    assert not drained and clock.now < 1.0
