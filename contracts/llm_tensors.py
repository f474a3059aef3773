"""The `llm` model's tensors (docs/tensors.md): one table that both ends of the stream read.

    gateway ── router/triton_backend.build_inputs ──▶ Triton ──▶ llm: bls/llm_request.py
            ◀── router/triton_backend.parse_response ◀──────────  bls/llm_pipeline.py

The gateway builds each input with the table's Triton datatype and numpy dtype; the `llm`
model reads them by the same names. model_repository/llm/config.pbtxt declares them to
Triton; tests/contracts/test_llm_tensors.py holds the three together.

Every request is its own batch (`max_batch_size: 0`), so a scalar is shape [1] and a list is
shape [-1]. BYTES travel as numpy object arrays of UTF-8 `bytes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class LlmInput:
    """One input of `llm`: its name, its type on the wire and in numpy, and its shape."""

    name: str
    datatype: str  # Triton's wire name: BYTES, INT32, INT64, FP32, BOOL
    dtype: type[np.generic]  # what a client builds the array with
    is_list: bool = False  # shape [-1]; otherwise a scalar, shape [1]
    required: bool = False  # Triton refuses a request without it, before `llm` runs

    def array(self, values: Sequence[str | bytes | int | float | bool]) -> npt.NDArray[Any]:
        """`values` as this input's array; texts of a BYTES input are encoded as UTF-8."""
        if not self.is_list and len(values) != 1:
            raise ValueError(f"llm input {self.name!r} is a scalar: give one value, got {len(values)}")
        if self.datatype == "BYTES":
            encoded = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
            # Filled element by element so that numpy never splits a `bytes` into characters.
            array = np.empty(len(encoded), dtype=np.object_)
            array[:] = encoded
            return array
        return np.asarray(values, dtype=self.dtype).reshape(-1)


TEXT_INPUT = LlmInput("text_input", "BYTES", np.object_, required=True)
MAX_TOKENS = LlmInput("max_tokens", "INT32", np.int32, required=True)
STOP = LlmInput("stop", "BYTES", np.object_, is_list=True)
STREAM = LlmInput("stream", "BOOL", np.bool_)
REQUEST_CLASS = LlmInput("request_class", "BYTES", np.object_)
TEMPERATURE = LlmInput("temperature", "FP32", np.float32)
TOP_P = LlmInput("top_p", "FP32", np.float32)
TOP_K = LlmInput("top_k", "INT32", np.int32)
SEED = LlmInput("seed", "INT64", np.int64)
IGNORE_EOS = LlmInput("ignore_eos", "BOOL", np.bool_)
RESUME_TOKEN_IDS = LlmInput("resume_token_ids", "INT32", np.int32, is_list=True)
CACHE_NAMESPACE = LlmInput("cache_namespace", "BYTES", np.object_)

# In config.pbtxt's order.
LLM_INPUTS: tuple[LlmInput, ...] = (
    TEXT_INPUT,
    MAX_TOKENS,
    STOP,
    STREAM,
    REQUEST_CLASS,
    TEMPERATURE,
    TOP_P,
    TOP_K,
    SEED,
    IGNORE_EOS,
    RESUME_TOKEN_IDS,
    CACHE_NAMESPACE,
)

TEXT_OUTPUT = "text_output"  # BYTES [1]: text since the previous response
OUTPUT_TOKEN_IDS = "output_token_ids"  # INT32 [-1]: token ids since the previous response
FINISH_REASON = "finish_reason"  # BYTES [1]: empty until the end (contracts.generation.FINISH_REASONS)
PROMPT_TOKENS = "prompt_tokens"  # INT32 [1]
CACHED_TOKENS = "cached_tokens"  # INT32 [1]
COMPLETION_TOKENS = "completion_tokens"  # INT32 [1]

LLM_OUTPUT_NAMES: tuple[str, ...] = (
    TEXT_OUTPUT,
    OUTPUT_TOKEN_IDS,
    FINISH_REASON,
    PROMPT_TOKENS,
    CACHED_TOKENS,
    COMPLETION_TOKENS,
)
