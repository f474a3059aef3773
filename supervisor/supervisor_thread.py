"""A `Supervisor` for synchronous callers (`Stack`, so `switchyard up`): it runs on its own
event loop in a thread of its own, with its own Redis client.

    start()  ─▶ thread: Supervisor.start() ─▶ every server READY ─▶ start() returns
                        Supervisor.run() ... until stop()
    set_target(pool, n) ─▶ Supervisor.set_target on its loop (the autoscaler's actuator)
    stop()   ─▶ thread: Supervisor.stop() (servers stopped, deregistered) ─▶ joined
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from config.redis_client import redis_client
from config.settings import SwitchyardConfig
from fleet_state.load_board import LoadBoard
from fleet_state.registry import ServerRegistry
from server_host.ports import PortAllocator
from supervisor.supervisor import Supervisor
from threads.loop_thread import LoopThread

logger = logging.getLogger(__name__)

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
        self._start_timeout_s: float | None = None
        # Not a daemon: at exit the interpreter waits for the servers to be stopped.
        self._thread = LoopThread("supervisor", self._main, logger)
        self._supervisor: Supervisor | None = None

    def start(self, timeout_s: float | None = None) -> None:
        """Return once every server is READY; raise what `Supervisor.start` raised otherwise."""
        self._start_timeout_s = timeout_s
        self._thread.start(until_ready=True)

    def set_target(self, pool_id: str, copies: int, timeout_s: float = 10.0) -> None:
        """Run `copies` copies of the pool (`Supervisor.set_target`), from any thread; raises
        its ValueError, or RuntimeError when the supervisor is not running."""
        supervisor = self._supervisor
        if supervisor is None or not self.alive():
            raise RuntimeError("the supervisor is not running")

        async def apply() -> None:
            supervisor.set_target(pool_id, copies)

        self._thread.call(apply, timeout_s)

    def alive(self) -> bool:
        return self._thread.alive()

    def stop(self) -> None:
        """Stop and deregister every server (`Supervisor.stop`), and wait for that."""
        self._thread.stop()

    async def _main(self, stop: asyncio.Event) -> None:
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
            # What this raises, start() raises; Supervisor.start has stopped whatever it launched.
            await supervisor.start(self._start_timeout_s)
            self._thread.ready()
            watch = asyncio.create_task(supervisor.run())
            await stop.wait()
            watch.cancel()
            self._supervisor = None
            await supervisor.stop()
        finally:
            await client.aclose()
