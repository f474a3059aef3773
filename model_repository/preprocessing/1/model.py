"""Triton shell of `preprocessing`. The logic is in bls/preprocessing.py."""

import json

import triton_python_backend_utils as pb_utils

from bls.model_config import model_parameters, param_path, require_decoupled
from bls.preprocessing import Preprocessor
from bls.stub_faults import enable_fault_log
from bls.tokenizer import PromptTokenizer
from bls.triton_bindings import execute_stateless


class TritonPythonModel:
    def initialize(self, args):
        enable_fault_log()  # a crash leaves Python stacks in the server's log
        config = json.loads(args["model_config"])
        require_decoupled(config, False)
        model_dir = param_path(model_parameters(config), "model_dir")
        self._preprocessor = Preprocessor(PromptTokenizer.from_model_dir(model_dir))

    def execute(self, requests):
        return execute_stateless(pb_utils, requests, self._preprocessor.execute, "preprocessing")
