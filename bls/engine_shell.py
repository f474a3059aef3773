"""What every engine model's Triton shell does around its engine loop (`cpu_engine` on CPUs,
`tensorrt_llm` on GPUs): host the loop with the Triton metrics and the pool's stream pacing, and
hand each request to the host. Only the loop differs between engines."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from bls.engine_host import EngineHost, EngineLoopLike
from bls.metrics import TritonEngineMetrics
from bls.model_config import param_int
from bls.triton_bindings import PbResponseSink, PbTensorSource
from contracts.latency_log import LatencyLog


def triton_engine_host(
    pb_utils: Any, args: Mapping[str, str], params: Mapping[str, str], loop: EngineLoopLike
) -> EngineHost:
    """An `EngineHost` for `loop`, publishing with the model's labels, paced by its parameters."""
    labels = {"model": args["model_name"], "version": args["model_version"]}
    metrics = TritonEngineMetrics(pb_utils.MetricFamily, labels)
    return EngineHost(
        loop,
        metrics,
        stream_interval_s=param_int(params, "stream_interval_ms") / 1000,
        max_responses_per_s=param_int(params, "max_stream_responses_per_s"),
        latency_log=LatencyLog.from_environment(os.environ),
        name=args["model_name"],
    )


def handle_triton_requests(pb_utils: Any, host: EngineHost, requests: Iterable[Any]) -> None:
    """`execute` of a decoupled engine model: every request to the host, which answers it."""
    for request in requests:
        source = PbTensorSource.of_request(pb_utils, request)
        host.handle(request.request_id(), source, PbResponseSink(pb_utils, request))
