"""Triton shell of `llm`, the decoupled entry point. The logic is in bls/llm_model.py and
bls/llm_pipeline.py."""

import json

import triton_python_backend_utils as pb_utils

from bls.llm_model import LlmModel
from bls.model_config import require_decoupled
from bls.stub_faults import enable_fault_log


class TritonPythonModel:
    def initialize(self, args):
        enable_fault_log()  # a crash leaves Python stacks in the server's log
        config = json.loads(args["model_config"])
        require_decoupled(config, True)
        self._model = LlmModel.on_triton(pb_utils, config, args["model_name"], args["model_version"])

    async def execute(self, requests):
        await self._model.execute(requests)
        return None

    def finalize(self):
        self._model.close()
