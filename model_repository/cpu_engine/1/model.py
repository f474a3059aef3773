"""Triton shell of `cpu_engine`, the CPU reference engine. The logic is in bls/engine_host.py."""

import json

import triton_python_backend_utils as pb_utils

from bls.engine_shell import handle_triton_requests, triton_engine_host
from bls.model_config import engine_config_from_parameters, model_parameters, param_path, require_decoupled
from bls.stub_faults import enable_fault_log
from engine.engine_loop import EngineLoop
from engine.llm_engine import LLMEngine


class TritonPythonModel:
    def initialize(self, args):
        enable_fault_log()  # a crash leaves Python stacks in the server's log
        config = json.loads(args["model_config"])
        require_decoupled(config, True)
        params = model_parameters(config)
        engine = LLMEngine.from_pretrained(param_path(params, "model_dir"), engine_config_from_parameters(params))
        self._host = triton_engine_host(pb_utils, args, params, EngineLoop(engine))
        self._host.start()

    def execute(self, requests):
        handle_triton_requests(pb_utils, self._host, requests)
        return None

    def finalize(self):
        self._host.stop(timeout=5.0)
