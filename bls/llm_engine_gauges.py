"""Switchyard's engine gauges, published by `llm` for an engine that cannot publish them.

TensorRT-LLM's C++ backend exports the `nv_trt_llm_*` gauges the router scores servers by, but
not Switchyard's own two (contracts/metric_names.py):

    switchyard_engine_requests{request_class}   unfinished engine requests, by class
    switchyard_engine_heartbeat                 Unix time, advancing while the publisher lives

Without the heartbeat a supervisor and the k8s readiness probe count the server dead. `llm`
sees every engine request (nothing else calls the engine), so it counts them:

    TritonStages.generate ──started(request)──▶ counts[class] += 1
                          ──finished(request)─▶ counts[class] -= 1   (after the engine's FINAL)
    daemon thread, every interval_s ──▶ heartbeat(now), then each class count that changed

All gauge writes happen on the one thread: setting a gauge is a round trip to the Triton
server, which the event loop must not wait for. The heartbeat then proves that `llm`'s stub
is alive, not the engine; a dead C++ engine shows in Triton's own health instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from bls.metrics import GaugeSample, TritonEngineMetrics
from contracts.metric_names import CLASS_METRIC
from engine.request import EngineRequest, RequestClass

logger = logging.getLogger(__name__)


class EngineRequestObserver(Protocol):
    """Told when an engine request starts and when the engine has finished it."""

    def started(self, request: EngineRequest) -> None: ...

    def finished(self, request: EngineRequest) -> None: ...


class GaugeWriter(Protocol):
    """What this publisher needs of `bls.metrics.TritonEngineMetrics`."""

    def set_gauge(self, sample: GaugeSample) -> None: ...

    def heartbeat(self, unix_time: float) -> None: ...


class LlmEngineGauges:
    """Counts unfinished engine requests by class; a daemon thread publishes them and a heartbeat.

    `started`/`finished` may be called from any thread; they only touch a counter.
    """

    def __init__(
        self,
        writer: GaugeWriter,
        *,
        interval_s: float = 0.1,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._writer: GaugeWriter | None = writer  # None once stopped
        self._interval_s = interval_s
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(RequestClass, 0)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def on_triton(
        cls,
        metric_family: Any,
        labels: Mapping[str, str],
        *,
        interval_s: float = 0.1,
        wall_clock: Callable[[], float] = time.time,
    ) -> LlmEngineGauges:
        """Publishing through `pb_utils.MetricFamily`: the class gauges and the heartbeat only,
        never a second registration of the backend's own `nv_trt_llm_*` families."""
        metrics = TritonEngineMetrics(metric_family, labels, families=(CLASS_METRIC,))
        return cls(metrics, interval_s=interval_s, wall_clock=wall_clock)

    def started(self, request: EngineRequest) -> None:
        with self._lock:
            self._counts[request.request_class] += 1

    def finished(self, request: EngineRequest) -> None:
        with self._lock:
            count = self._counts[request.request_class]
            assert count > 0, f"finished {request.request_id!r} more often than started"
            self._counts[request.request_class] = count - 1

    def counts(self) -> dict[RequestClass, int]:
        with self._lock:
            return dict(self._counts)

    def publish(self) -> None:
        """One pass: the heartbeat, then every class count (the writer skips unchanged ones);
        nothing once stopped."""
        writer = self._writer
        if writer is None:
            return
        writer.heartbeat(self._wall_clock())
        for request_class, count in self.counts().items():
            writer.set_gauge(GaugeSample(CLASS_METRIC, request_class.value, count))

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("LlmEngineGauges already started")
        self._thread = threading.Thread(target=self._run, name="llm-engine-gauges", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
        # The writer holds Triton's metric families: they must be freed now, while the stub can
        # still tell the server, not at its teardown (a SIGSEGV: see bls/engine_host.py).
        self._writer = None

    def _run(self) -> None:
        while True:
            try:
                self.publish()
            except Exception:  # a failed write must not stop the heartbeat for good
                logger.exception("publishing llm's engine gauges failed")
            if self._stopping.wait(self._interval_s):
                return
