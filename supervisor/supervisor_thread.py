"""A `Supervisor` for synchronous callers (`Stack`, so `switchyard up`): it runs on its own
event loop in a thread of its own, with its own Redis client.

    start()  ─▶ thread: Supervisor.start() ─▶ every server READY ─▶ start() returns
                        Supervisor.run() ... until stop()
    set_target(pool, n) ─▶ Supervisor.set_target on its loop (the autoscaler's actuator)
    stop()   ─▶ thread: Supervisor.stop() (servers stopped, deregistered) ─▶ joined
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

from config.redis_client import redis_client
from config.settings import SwitchyardConfig
from fleet_state.load_board import LoadBoard
from fleet_state.registry import ServerRegistry
from server_host.ports import PortAllocator
from supervisor.supervisor import Supervisor

# The supervisor's passes (probes, registrations, targets) on one loop: a few connections.
SUPERVISOR_CONNECTIONS = 8


class SupervisorThread:
    """Start, watch and stop the servers of `pool_ids` from synchronous code."""

    def __init__(
        self,
        config: SwitchyardConfig,
        ports: PortAllocator,
        *,
        pool_ids: Sequence[str] | None = None,
        config_path: Path | None = None,
    ) -> None:
        self._config = config
        self._ports = ports
        self._pool_ids = pool_ids
        self._config_path = config_path
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._supervisor: Supervisor | None = None

    def start(self, timeout_s: float | None = None) -> None:
        """Return once every server is READY; raise what `Supervisor.start` raised otherwise."""
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(timeout_s),), name="supervisor")
        self._thread.start()
        while not self._started.wait(0.5):
            if not self._thread.is_alive():
                raise RuntimeError("the supervisor thread died while starting the servers (see its traceback)")
        if self._error is not None:
            self._thread.join()
            raise self._error

    def set_target(self, pool_id: str, copies: int, timeout_s: float = 10.0) -> None:
        """Run `copies` copies of the pool (`Supervisor.set_target`), from any thread; raises
        its ValueError, or RuntimeError when the supervisor is not running."""
        supervisor, loop = self._supervisor, self._loop
        if supervisor is None or loop is None or not self.alive():
            raise RuntimeError("the supervisor is not running")

        async def apply() -> None:
            supervisor.set_target(pool_id, copies)

        asyncio.run_coroutine_threadsafe(apply(), loop).result(timeout_s)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stopping is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join()
        self._thread = None

    async def _main(self, timeout_s: float | None) -> None:
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        client = redis_client(self._config, "fleet", max_connections=SUPERVISOR_CONNECTIONS)
        try:
            registry = ServerRegistry(client, self._config.fleet.dead_after_s)
            supervisor = Supervisor(
                self._config,
                registry,
                self._ports,
                LoadBoard(client),
                pool_ids=self._pool_ids,
                config_path=self._config_path,
            )
            self._supervisor = supervisor
            try:
                await supervisor.start(timeout_s)
            except BaseException as exc:  # start() has stopped whatever it launched
                self._error = exc
                return
            finally:
                self._started.set()
            watch = asyncio.create_task(supervisor.run())
            await self._stopping.wait()
            watch.cancel()
            self._supervisor = None
            await supervisor.stop()
        finally:
            await client.aclose()
