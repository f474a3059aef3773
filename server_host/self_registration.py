"""A server that registers itself: `switchyard triton --register-host HOST`.

Under `switchyard up` the supervisor registers its servers and heartbeats them. Where no
supervisor runs (a Kubernetes pod per server), the server's own process does the same for
itself: it registers once its tritonserver is ready, heartbeats while the probes find it alive
(health ready and the engine heartbeat advancing, `fleet_state.server_health.Liveness`), and
deregisters when it stops. A server that stops beating reads as dead after `dead_after_s`.

Each registration takes a new epoch (fleet_state/epochs.py). A server whose host was cut off
long enough to be replaced (a new pod with its id registered) finds its heartbeat refused
(`Fenced`) when the link comes back: it stops beating and sets `fenced`, and its process exits
(server_host/server_process.py) instead of serving beside its replacement.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import replace

import httpx
import redis.asyncio

from config.redis_client import redis_client
from config.settings import SwitchyardConfig
from fleet_state.epochs import Fenced
from fleet_state.registry import ServerInfo, ServerRegistry
from fleet_state.server_health import Liveness, Verdict, probe_server
from fleet_state.server_state import ServerState
from threads.loop_thread import LoopThread, wait_or_stop

logger = logging.getLogger(__name__)


class SelfRegistration:
    """Registers `info` and heartbeats it from a thread of its own until `stop()`."""

    def __init__(self, config: SwitchyardConfig, info: ServerInfo) -> None:
        self._config = config
        self._info = info
        self.fenced = threading.Event()
        self.epoch: int | None = None  # of its registration, once registered
        # Not a daemon: the process waits for its deregistration at exit.
        self._thread = LoopThread("self-registration", self._run, logger)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop heartbeating and deregister (waits up to 10 s)."""
        self._thread.stop(timeout_s=10)

    async def _run(self, stop: asyncio.Event) -> None:
        fleet = self._config.fleet
        client = redis_client(self._config, "fleet", socket_timeout=2.0, max_connections=2)  # a heartbeat
        registry = ServerRegistry(client, fleet.dead_after_s)
        liveness = Liveness(fleet.dead_after_s)
        info = self._info
        try:
            async with httpx.AsyncClient() as http:
                registered = False
                while not stop.is_set():
                    now = time.time()
                    probe = await probe_server(http, info.health_url, info.metrics_url, fleet.heartbeat_s * 2)
                    verdict = liveness.observe(now, probe)
                    try:
                        if verdict is Verdict.ALIVE and not registered:
                            ready = replace(info, state=ServerState.READY, heartbeat_at=now, epoch=self.epoch)
                            self.epoch = await registry.register(ready)  # again: the same epoch
                            registered = True
                        elif verdict is Verdict.ALIVE and not await registry.heartbeat(
                            info.server_id, now, ServerState.READY, epoch=self.epoch
                        ):
                            registered = False  # Redis lost it (flushed, restarted): register again
                    except Fenced as exc:
                        logger.error("%s: stopping", exc)
                        self.fenced.set()
                        return  # the record is the replacement's: not deregistered
                    except (OSError, redis.RedisError) as exc:
                        logger.warning("cannot reach the registry at %s: %s", self._config.redis.address, exc)
                    await wait_or_stop(stop, fleet.heartbeat_s)
                if registered:
                    with contextlib.suppress(Fenced):
                        await registry.deregister(info.server_id, epoch=self.epoch)
        finally:
            await client.aclose()
