"""Triton shell of `cpu_engine`, the CPU reference engine. The logic is in bls/engine_host.py."""

import json

import triton_python_backend_utils as pb_utils

from bls.engine_host import EngineHost
from bls.metrics import TritonEngineMetrics
from bls.model_config import (
    engine_config_from_parameters,
    model_parameters,
    param_int,
    param_path,
    require_decoupled,
)
from bls.triton_bindings import PbResponseSink, PbTensorSource
from engine.engine_loop import EngineLoop
from engine.llm_engine import LLMEngine


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        require_decoupled(config, True)
        params = model_parameters(config)
        engine = LLMEngine.from_pretrained(param_path(params, "model_dir"), engine_config_from_parameters(params))
        metrics = TritonEngineMetrics(
            pb_utils.MetricFamily, {"model": args["model_name"], "version": args["model_version"]}
        )
        self._host = EngineHost(
            EngineLoop(engine),
            metrics,
            stream_interval_s=param_int(params, "stream_interval_ms") / 1000,
            max_responses_per_s=param_int(params, "max_stream_responses_per_s"),
        )
        self._host.start()

    def execute(self, requests):
        for request in requests:
            self._host.handle(
                request.request_id(),
                PbTensorSource.of_request(pb_utils, request),
                PbResponseSink(pb_utils, request),
            )
        return None

    def finalize(self):
        self._host.stop(timeout=5.0)
