"""Triton shell of `tensorrt_llm` on GPUs: TensorRT-LLM's LLM API behind the `cpu_engine`
contract. The logic is in trtllm/ (the engine loop) and bls/engine_host.py (streaming)."""

import json
from pathlib import Path

import triton_python_backend_utils as pb_utils

from bls.engine_host import EngineHost
from bls.metrics import TritonEngineMetrics
from bls.model_config import model_parameters, param_int, require_decoupled
from bls.triton_bindings import PbResponseSink, PbTensorSource
from trtllm.engine_loop import LlmApiEngineLoop
from trtllm.llm_config import MODEL_YAML, engine_limits, load_llm_args


class TritonPythonModel:
    def initialize(self, args):
        from tensorrt_llm import LLM, SamplingParams  # only on GPU hosts

        config = json.loads(args["model_config"])
        require_decoupled(config, True)
        params = model_parameters(config)
        llm_args = load_llm_args(Path(args["model_repository"]) / MODEL_YAML)
        limits = engine_limits(llm_args, params)
        loop = LlmApiEngineLoop(LLM(**llm_args), SamplingParams, limits)
        metrics = TritonEngineMetrics(
            pb_utils.MetricFamily, {"model": args["model_name"], "version": args["model_version"]}
        )
        self._host = EngineHost(
            loop,
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
        self._host.stop(timeout=30.0)
