"""The `llm` model as its Triton shell runs it: built once from config.pbtxt, then serving.

    config.pbtxt parameters ─▶ LlmModel.on_triton ─┬─ executor (max_streams threads)
                                                   ├─ tokenizer: preprocessor (prompts sent as
                                                   │  ids), postprocessor (postprocess_in_process)
                                                   ├─ engine dialect, and gauges when the
                                                   │  engine cannot publish its own
                                                   ├─ the engine itself (engine_in_process:
                                                   │  bls/in_process_engine.py)
                                                   └─ TritonStages ─▶ LlmPipeline
    execute(requests) ─▶ one pipeline run per request, all at once on the stub's event loop
    close()           ─▶ gauges stopped, the engine stopped, executor shut down

The shell (model_repository/llm/1/model.py) keeps Triton's lifecycle only; everything here
takes `pb_utils` as an argument, so it is tested with a fake one.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bls.engine_host import EngineHost
from bls.engine_shell import triton_engine_host
from bls.in_process_engine import InProcessEngine
from bls.llm_engine_gauges import LlmEngineGauges
from bls.llm_pipeline import LlmPipeline
from bls.model_config import (
    engine_config_from_parameters,
    engine_dialect_from_parameters,
    model_parameters,
    param_bool,
    param_int,
    param_path,
    param_str,
)
from bls.postprocessing import Postprocessor
from bls.preprocessing import Preprocessor
from bls.tokenizer import PromptTokenizer
from bls.triton_bindings import PbResponseSink, PbTensorSource, RequestIds
from bls.triton_stages import TritonStages
from contracts.latency_log import LatencyLog
from engine.engine_loop import EngineLoop
from engine.llm_engine import LLMEngine


class LlmModel:
    """The loaded `llm` model: its pipeline, and what must be released at unload."""

    def __init__(
        self,
        pb_utils: Any,
        pipeline: LlmPipeline,
        executor: ThreadPoolExecutor,
        gauges: LlmEngineGauges | None = None,
        host: EngineHost | None = None,
    ) -> None:
        self._pb = pb_utils
        self._host = host
        self._pipeline = pipeline
        self._executor = executor
        self._gauges = gauges
        self._ids = RequestIds("llm")

    @classmethod
    def on_triton(cls, pb_utils: Any, model_config: Mapping[str, Any], model_name: str, model_version: str) -> LlmModel:
        """Build from the model config Triton hands `initialize` (parsed from its JSON);
        ModelConfigError names a parameter that is missing or wrong."""
        params = model_parameters(model_config)
        # The tokenizer `preprocessing` loads, for prompts that arrive as token ids (their range,
        # their stop strings) and, when asked, for detokenizing in this process.
        tokenizer = PromptTokenizer.from_model_dir(param_path(params, "model_dir"))
        # The engine in this process (bls/in_process_engine.py) when the repository says so.
        host = None
        if param_bool(params, "engine_in_process", default=False):
            engine = LLMEngine.from_pretrained(param_path(params, "model_dir"), engine_config_from_parameters(params))
            args = {"model_name": model_name, "model_version": model_version}
            host = triton_engine_host(pb_utils, args, params, EngineLoop(engine))
            host.start()
        postprocessor = Postprocessor(tokenizer) if param_bool(params, "postprocess_in_process") else None
        dialect = engine_dialect_from_parameters(params)
        engine_model = param_str(params, "engine_model_name")
        # One worker thread per reply waiting on the engine (see bls/triton_stages.py).
        executor = ThreadPoolExecutor(max_workers=param_int(params, "max_streams"), thread_name_prefix="llm")
        # An engine that cannot publish Switchyard's heartbeat and per-class gauges (the C++
        # backend): llm sees every engine request, so it publishes them (bls/llm_engine_gauges.py).
        gauges = None
        if not dialect.engine_publishes_switchyard_metrics:
            labels = {"model": model_name, "version": model_version}
            gauges = LlmEngineGauges.on_triton(pb_utils.MetricFamily, labels)
            gauges.start()
        stages = TritonStages(
            pb_utils, engine_model, executor, postprocessor=postprocessor, preprocessor=Preprocessor(tokenizer),
            dialect=dialect, observer=gauges, engine=None if host is None else InProcessEngine(host),
        )  # fmt: skip
        pipeline = LlmPipeline(stages, latency_log=LatencyLog.from_environment(os.environ))
        return cls(pb_utils, pipeline, executor, gauges, host)

    async def execute(self, requests: Iterable[Any]) -> None:
        """Serve Triton requests; each one is answered on its own response sender."""
        await asyncio.gather(
            *(
                self._pipeline.run(
                    self._ids.for_request(request.request_id()),
                    PbTensorSource.of_request(self._pb, request),
                    PbResponseSink(self._pb, request),
                )
                for request in requests
            )
        )

    def close(self) -> None:
        """Stop the gauges' thread and the workers; replies still waiting are dropped.

        Stopped gauges let go of Triton's metric families, which must be freed while the stub
        can still tell the server, not at its teardown (a SIGSEGV, see bls/engine_host.py)."""
        if self._gauges is not None:
            self._gauges.stop()
        if self._host is not None:
            self._host.stop(timeout=5.0)
        self._executor.shutdown(wait=False, cancel_futures=True)
