"""Triton shell of `llm`, the decoupled entry point. The logic is in bls/llm_pipeline.py."""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import triton_python_backend_utils as pb_utils

from bls.llm_engine_gauges import LlmEngineGauges
from bls.llm_pipeline import LlmPipeline
from bls.model_config import (
    engine_dialect_from_parameters,
    model_parameters,
    param_bool,
    param_int,
    param_path,
    param_str,
    require_decoupled,
)
from bls.postprocessing import Postprocessor
from bls.tokenizer import PromptTokenizer
from bls.triton_bindings import PbResponseSink, PbTensorSource, RequestIds
from bls.triton_stages import TritonStages


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        require_decoupled(config, True)
        params = model_parameters(config)
        # One worker thread per reply waiting on the engine (see bls/triton_stages.py).
        self._executor = ThreadPoolExecutor(max_workers=param_int(params, "max_streams"), thread_name_prefix="llm")
        postprocessor = None
        if param_bool(params, "postprocess_in_process"):
            postprocessor = Postprocessor(PromptTokenizer.from_model_dir(param_path(params, "model_dir")))
        dialect = engine_dialect_from_parameters(params)
        # An engine that cannot publish Switchyard's heartbeat and per-class gauges (the C++
        # backend): llm sees every engine request, so it publishes them (bls/llm_engine_gauges.py).
        self._gauges = None
        if not dialect.engine_publishes_switchyard_metrics:
            labels = {"model": args["model_name"], "version": args["model_version"]}
            self._gauges = LlmEngineGauges.on_triton(pb_utils.MetricFamily, labels)
            self._gauges.start()
        stages = TritonStages(
            pb_utils,
            param_str(params, "engine_model_name"),
            self._executor,
            postprocessor=postprocessor,
            dialect=dialect,
            observer=self._gauges,
        )
        self._pipeline = LlmPipeline(stages)
        self._ids = RequestIds("llm")

    async def execute(self, requests):
        await asyncio.gather(
            *(
                self._pipeline.run(
                    self._ids.for_request(request.request_id()),
                    PbTensorSource.of_request(pb_utils, request),
                    PbResponseSink(pb_utils, request),
                )
                for request in requests
            )
        )
        return None

    def finalize(self):
        if self._gauges is not None:
            self._gauges.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)
