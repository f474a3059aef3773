"""LoopThread: a service's loop on a thread of its own, started, called into and stopped from
synchronous code, and how it reports the way it ended."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from threads.loop_thread import LoopThread, wait_or_stop

LOGGER = logging.getLogger("tests.loop_thread")
DEADLINE_S = 30.0  # generous: a loaded machine may be slow to schedule the thread


def test_stop_sets_the_stop_event_and_main_shuts_down_on_its_loop() -> None:
    shut_down = threading.Event()
    loops: list[asyncio.AbstractEventLoop] = []

    async def main(stop: asyncio.Event) -> None:
        loops.append(asyncio.get_running_loop())
        await stop.wait()
        await asyncio.sleep(0)  # shutdown may still await
        shut_down.set()

    service = LoopThread("service", main, LOGGER)
    service.start()
    assert service.alive()
    assert service.stop(DEADLINE_S)
    assert shut_down.is_set() and not service.alive()
    assert service.error is None
    assert loops[0].is_closed()


def test_start_returns_with_the_loop_running_so_call_reaches_it() -> None:
    async def main(stop: asyncio.Event) -> None:
        await stop.wait()

    service = LoopThread("service", main, LOGGER)
    service.start()
    try:
        on_loop: list[str] = []

        async def where() -> str:
            on_loop.append(threading.current_thread().name)
            return "answered"

        assert service.call(where, DEADLINE_S) == "answered"
        assert on_loop == ["service"]
    finally:
        service.stop(DEADLINE_S)


def test_call_raises_what_the_call_raised_and_refuses_a_stopped_loop() -> None:
    async def main(stop: asyncio.Event) -> None:
        await stop.wait()

    async def refuse() -> None:
        raise ValueError("no such pool")

    service = LoopThread("service", main, LOGGER)
    service.start()
    with pytest.raises(ValueError, match="no such pool"):
        service.call(refuse, DEADLINE_S)
    service.stop(DEADLINE_S)
    with pytest.raises(RuntimeError, match="not running"):
        service.call(refuse, DEADLINE_S)


def test_until_ready_waits_for_main_to_say_so() -> None:
    began = threading.Event()
    service: LoopThread

    async def main(stop: asyncio.Event) -> None:
        began.set()
        await asyncio.sleep(0.2)  # a start-up that takes a while
        service.ready()
        await stop.wait()

    service = LoopThread("service", main, LOGGER)
    started_at = time.monotonic()
    service.start(until_ready=True)
    assert time.monotonic() - started_at >= 0.2
    service.stop(DEADLINE_S)


def test_a_failure_before_ready_is_raised_by_start_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def main(stop: asyncio.Event) -> None:
        raise OSError("port 8001 taken")

    service = LoopThread("service", main, LOGGER)
    with caplog.at_level(logging.ERROR, logger=LOGGER.name), pytest.raises(OSError, match="port 8001 taken"):
        service.start(until_ready=True)
    assert not service.alive()
    assert caplog.records == []


def test_a_failure_after_start_is_logged_through_the_owners_logger_and_kept(caplog: pytest.LogCaptureFixture) -> None:
    failing = threading.Event()

    async def main(stop: asyncio.Event) -> None:
        await asyncio.to_thread(failing.wait, DEADLINE_S)
        raise RuntimeError("redis went away")

    service = LoopThread("service", main, LOGGER)
    with caplog.at_level(logging.ERROR, logger=LOGGER.name):
        service.start()
        failing.set()
        assert service.stop(DEADLINE_S)
    assert isinstance(service.error, RuntimeError)
    [record] = caplog.records
    assert record.name == LOGGER.name and record.getMessage() == "service stopped"
    assert record.exc_info is not None and record.exc_info[1] is service.error


def test_stop_says_when_main_does_not_end_in_time(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()

    async def main(stop: asyncio.Event) -> None:
        await stop.wait()
        await asyncio.to_thread(release.wait, DEADLINE_S)  # a shutdown that hangs

    service = LoopThread("service", main, LOGGER, daemon=True)
    service.start()
    with caplog.at_level(logging.WARNING, logger=LOGGER.name):
        assert not service.stop(0.1)
    assert service.alive()
    assert "did not stop within" in caplog.text
    release.set()
    assert service.stop(DEADLINE_S)


def test_a_stopped_service_starts_again_but_a_running_one_does_not() -> None:
    runs: list[int] = []

    async def main(stop: asyncio.Event) -> None:
        runs.append(1)
        await stop.wait()

    service = LoopThread("service", main, LOGGER)
    service.start()
    with pytest.raises(RuntimeError, match="already running"):
        service.start()
    service.stop(DEADLINE_S)
    service.start()
    service.stop(DEADLINE_S)
    assert runs == [1, 1]


def test_stop_before_start_is_a_no_op() -> None:
    async def main(stop: asyncio.Event) -> None:
        await stop.wait()

    assert LoopThread("service", main, LOGGER).stop(0.1)


async def test_wait_or_stop_sleeps_unless_stopped() -> None:
    stop = asyncio.Event()
    began = time.monotonic()
    assert not await wait_or_stop(stop, 0.05)
    assert time.monotonic() - began >= 0.05
    asyncio.get_running_loop().call_later(0.01, stop.set)
    began = time.monotonic()
    assert await wait_or_stop(stop, DEADLINE_S)
    assert time.monotonic() - began < DEADLINE_S
    assert await wait_or_stop(stop, -1.0)  # a pause already overdue: no wait at all
