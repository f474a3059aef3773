"""A server publishes its own load: `switchyard triton --server-id ID` reads its tritonserver's
health and metrics on its own host every `fleet.load_publish_s` and writes one report to the
load board (fleet_state/load_board.py), where gateways, the dispatcher and the autoscaler read it.

    tritonserver ──/v2/health/ready, /metrics (local)──▶ LoadPublisher ──HSET──▶ sy:load:{pool}

Once per server, whatever the number of readers: 400 servers at 10 Hz are 4,000 small writes a
second in all (docs/capacity.md). The report is removed when the server stops, so readers do
not wait out its silence.

Each report carries the server's registration epoch when it has one: a server replaced while
its host was cut off is refused (`Fenced`, fleet_state/epochs.py) when it comes back, and stops
publishing, leaving its replacement's reports alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

import httpx
import redis.asyncio

from config.redis_client import redis_client
from config.settings import SwitchyardConfig
from fleet_state.epochs import Fenced
from fleet_state.load_board import LoadBoard, LoadReport
from fleet_state.server_health import probe_server
from threads.loop_thread import LoopThread, wait_or_stop

logger = logging.getLogger(__name__)
# A Redis outage is logged once per this many seconds, not at every report.
_WARN_EVERY_S = 30.0


class LoadPublisher:
    """Publishes one server's reports from a thread of its own until `stop()`."""

    def __init__(
        self,
        config: SwitchyardConfig,
        pool_id: str,
        server_id: str,
        health_url: str,
        metrics_url: str,
        epoch: Callable[[], int | None] = lambda: None,
    ) -> None:
        """`epoch`: the server's registration epoch now (None: none known yet, unfenced)."""
        self._config = config
        self._pool_id = pool_id
        self._server_id = server_id
        self._health_url = health_url
        self._metrics_url = metrics_url
        self._epoch = epoch
        self.fenced = threading.Event()
        # A daemon: a process that exits without stopping it leaves the report to go stale.
        self._thread = LoopThread("load-publisher", self._run, logger, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop publishing and remove the report (waits up to 10 s)."""
        self._thread.stop(timeout_s=10)

    async def _run(self, stop: asyncio.Event) -> None:
        interval_s = self._config.fleet.load_publish_s
        # One line of load every 0.1 s: two connections at most (docs/capacity.md: per server).
        client = redis_client(self._config, "fleet", socket_timeout=2.0, socket_connect_timeout=2.0, max_connections=2)
        board = LoadBoard(client)
        seq, warned_at = 0, float("-inf")
        try:
            async with httpx.AsyncClient() as http:
                while not stop.is_set():
                    began = time.monotonic()
                    probe = await probe_server(http, self._health_url, self._metrics_url, max(interval_s * 2, 1.0))
                    seq += 1
                    report = LoadReport(self._server_id, seq, time.time(), probe.ready, probe.engine, probe.refused)
                    try:
                        await board.publish(self._pool_id, report, epoch=self._epoch())
                    except Fenced as exc:
                        logger.error("%s: not publishing its load any more", exc)
                        self.fenced.set()
                        return  # the board's entry is the replacement's now: not removed
                    except (OSError, redis.RedisError) as exc:
                        if began - warned_at >= _WARN_EVERY_S:
                            logger.warning(
                                "cannot publish %s's load to %s: %s", self._server_id, self._config.redis.address, exc
                            )
                            warned_at = began
                    await wait_or_stop(stop, interval_s - (time.monotonic() - began))
            with contextlib.suppress(OSError, redis.RedisError):  # its silence says the same, later
                await board.remove(self._pool_id, self._server_id)
        finally:
            await client.aclose()
