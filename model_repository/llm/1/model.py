"""Triton shell of `llm`, the decoupled entry point. The logic is in bls/llm_model.py and
bls/llm_pipeline.py."""

import json

import triton_python_backend_utils as pb_utils

from bls.llm_model import LlmModel
from bls.model_config import require_decoupled
from bls.stub_faults import enable_fault_log
from config.startup_heap import freeze_startup_heap


class TritonPythonModel:
    def initialize(self, args):
        enable_fault_log()  # a crash leaves Python stacks in the server's log
        config = json.loads(args["model_config"])
        require_decoupled(config, True)
        self._model = LlmModel.on_triton(pb_utils, config, args["model_name"], args["model_version"])
        freeze_startup_heap()  # the model, tokenizer and engine: out of the collector's full passes

    async def execute(self, requests):
        await self._model.execute(requests)
        return None

    def finalize(self):
        self._model.close()
