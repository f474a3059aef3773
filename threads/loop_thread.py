"""An async service on an event loop of its own, in a thread of its own, for synchronous code.

    start() ─▶ thread: asyncio.run(main(stop)) ─▶ the loop runs ─▶ start() returns
                                                   (until_ready: once main calls ready())
    call(f) ─▶ f() on the loop, from any thread ─▶ its result, or its exception
    stop()  ─▶ stop.set() on the loop ─▶ main sees it, shuts down, returns ─▶ joined

`main` owns what it opens (Redis clients, HTTP clients) and closes it on its way out, so stop
means an orderly shutdown, not a kill. An exception that ends `main` is kept in `error` and
logged through the owner's logger, so it lands in the owner's log (the autoscaler's file, say);
one raised before `ready()` while `start(until_ready=True)` waits is raised by `start()`
instead, where the caller can act on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class LoopThread:
    """Runs `main(stop)` on its own loop and thread until `stop()` sets `stop`."""

    def __init__(
        self,
        name: str,
        main: Callable[[asyncio.Event], Awaitable[None]],
        logger: logging.Logger,
        *,
        daemon: bool = False,
    ) -> None:
        """`daemon`: the process may exit with the thread still running (a service whose
        shutdown nobody waits for); otherwise the interpreter waits for it at exit."""
        self.name = name
        self._main = main
        self._logger = logger
        self._daemon = daemon
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._running = threading.Event()  # the loop runs: stop() and call() can reach it
        self._ready = threading.Event()
        self._raise_at_start = False
        self.error: BaseException | None = None

    def start(self, *, until_ready: bool = False) -> None:
        """Start `main`; return once its loop runs. With `until_ready`, once `main` has called
        `ready()` instead, raising what `main` raised if it ended before that."""
        if self.alive():
            raise RuntimeError(f"{self.name} is already running")
        self._running.clear()
        self._ready.clear()
        self._raise_at_start = until_ready
        self.error = None
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=self._daemon)
        self._thread.start()
        started = self._ready if until_ready else self._running
        # Polled, not waited on once: the thread may end without ever getting there.
        while not started.wait(0.1):
            if not self._thread.is_alive():
                break
        if until_ready and not self._ready.is_set():
            self._thread.join()
            if self.error is not None:
                raise self.error
            raise RuntimeError(f"{self.name} ended before it was ready")

    def ready(self) -> None:
        """Called by `main` once it has started: `start(until_ready=True)` returns."""
        self._ready.set()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout_s: float | None = None) -> bool:
        """Ask `main` to end and wait up to `timeout_s` (None: as long as it takes) for the
        thread. True when it has ended; False (and a warning) when it is still running."""
        thread = self._thread
        if thread is None:
            return True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has just closed: main is over
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout_s)
        if thread.is_alive():
            self._logger.warning("%s did not stop within %.0f s", self.name, timeout_s or 0.0)
            return False
        self._thread = None
        return True

    def call(self, function: Callable[[], Awaitable[T]], timeout_s: float) -> T:
        """Await `function()` on the loop from another thread; its result or its exception.
        RuntimeError when the loop is not running."""
        loop = self._loop
        if loop is None or not self.alive():
            raise RuntimeError(f"{self.name} is not running")

        async def run() -> T:
            return await function()

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout_s)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self.error = exc
            if not (self._raise_at_start and not self._ready.is_set()):
                self._logger.error("%s stopped", self.name, exc_info=exc)
        finally:
            self._loop = None

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self._running.set()
        await self._main(self._stop)


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep `seconds`, cut short by `stop`: True when stopped. A service's pause between
    passes, so that stopping it does not wait out the pause."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, seconds))
    return stop.is_set()
