"""Triton shell of `tensorrt_llm` on GPUs: TensorRT-LLM's LLM API behind the `cpu_engine`
contract. The logic is in trtllm/ (the engine loop) and bls/engine_host.py (streaming)."""

import json
from pathlib import Path

import triton_python_backend_utils as pb_utils

from bls.engine_shell import handle_triton_requests, triton_engine_host
from bls.model_config import model_parameters, require_decoupled
from bls.stub_faults import enable_fault_log
from build_engines.trtllm_pin import PINNED_RELEASE
from engine.grammar import GrammarCompiler
from trtllm.engine_loop import LlmApiEngineLoop
from trtllm.llm_config import MODEL_YAML, engine_limits, load_llm_args


class TritonPythonModel:
    def initialize(self, args):
        enable_fault_log()  # a crash leaves Python stacks in the server's log
        from tensorrt_llm import LLM, SamplingParams  # only on GPU hosts
        from tensorrt_llm.sampling_params import GuidedDecodingParams

        config = json.loads(args["model_config"])
        require_decoupled(config, True)
        params = model_parameters(config)
        llm_args = load_llm_args(Path(args["model_repository"]) / MODEL_YAML)
        # Grammars only when model.yaml turned a guided decoding backend on (build_engines/llm_api_args.py).
        guided = GuidedDecodingParams if llm_args.get("guided_decoding_backend") else None
        limits = engine_limits(llm_args, params)
        # The checkpoint's tokenizer checks that a constrained reply ended `stop` is complete.
        checkpoint = Path(str(llm_args["model"]))
        grammars = GrammarCompiler.from_model_dir(checkpoint, limits.vocab_size, limits.end_id) if guided else None
        loop = LlmApiEngineLoop(
            LLM(**llm_args),
            SamplingParams,
            limits,
            # Request priorities where the pinned release takes them; else the loop holds bulk back.
            with_priority=PINNED_RELEASE.supports_priority,
            guided_decoding_params=guided,
            grammars=grammars,
        )
        self._host = triton_engine_host(pb_utils, args, params, loop)
        self._host.start()

    def execute(self, requests):
        handle_triton_requests(pb_utils, self._host, requests)
        return None

    def finalize(self):
        self._host.stop(timeout=30.0)
