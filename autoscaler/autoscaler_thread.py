"""The autoscaler for synchronous callers (`Stack`, so `switchyard up`): `serve_autoscaler` on an
event loop of its own, in a thread of its own, beside the supervisor's.

    start() ─▶ thread: serve_autoscaler(...) ... every interval_s ... until stop()
    stop()  ─▶ the loop's stop event is set ─▶ the pass in progress ends ─▶ joined

With `SupervisorActuator(SupervisorThread)` its targets cross to the supervisor's loop through
`SupervisorThread.set_target`, which is safe from any thread. With `log_path`, the decisions
(the `autoscaler` and `supervisor` loggers, INFO and up) are also written there while it runs, as every other part of
`switchyard up` writes its own file under var/logs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from autoscaler.actuators import Actuator
from autoscaler.live import LiveOptions, serve_autoscaler
from autoscaler.signals import ServerCapacity
from config.settings import SwitchyardConfig
from threads.loop_thread import LoopThread

logger = logging.getLogger(__name__)

# The autoscaler's decisions and the supervisor's actions on them go to the autoscaler's log.
_LOGGED = ("autoscaler", "supervisor")


class AutoscalerThread:
    """`serve_autoscaler` for the pools, from synchronous code, until `stop()`."""

    def __init__(
        self,
        config: SwitchyardConfig,
        actuator: Actuator,
        pool_ids: Sequence[str],
        options: LiveOptions | None = None,
        *,
        capacities: Mapping[str, ServerCapacity] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self._config = config
        self._actuator = actuator
        self._pool_ids = list(pool_ids)
        self._options = options if options is not None else LiveOptions()
        self._capacities = capacities
        self._thread = LoopThread("autoscaler", self._main, logger, daemon=True)
        self._log_path = log_path
        self._log_handler: logging.Handler | None = None

    def start(self) -> None:
        if self._log_path is not None:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_handler = logging.FileHandler(self._log_path)
            self._log_handler.setLevel(logging.INFO)
            self._log_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            for name in _LOGGED:
                logged = logging.getLogger(name)
                logged.addHandler(self._log_handler)
                if logged.getEffectiveLevel() > logging.INFO:
                    logged.setLevel(logging.INFO)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.alive()

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the pass in progress and the loop (a warning if that takes over `timeout_s`)."""
        self._thread.stop(timeout_s)
        if self._log_handler is not None:
            for name in _LOGGED:
                logging.getLogger(name).removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None

    async def _main(self, stop: asyncio.Event) -> None:
        # An exception that ends it is logged through this module's logger, so to the log file.
        await serve_autoscaler(
            self._config, self._actuator, self._pool_ids, stop, self._options, capacities=self._capacities
        )
