"""The `llm` model's tensors (docs/tensors.md): one table that both ends of the stream read.

    gateway ── router/triton_backend.build_inputs ──▶ Triton ──▶ llm: bls/llm_request.py
            ◀── router/triton_backend.parse_response ◀──────────  bls/llm_pipeline.py

The gateway builds each input with the table's Triton datatype and numpy dtype; the `llm`
model reads them by the same names. model_repository/llm/config.pbtxt declares them to
Triton; tests/contracts/test_llm_tensors.py holds the three together.

Every request is its own batch (`max_batch_size: 0`), so a scalar is shape [1] and a list is
shape [-1]. BYTES travel as numpy object arrays of UTF-8 `bytes`.

Errors: `llm` answers a request whose input it refuses (a value out of the engine's range, a
prompt that does not fit) with an error whose message starts with `INVALID_INPUT_PREFIX`, and
Triton's INVALID_ARG code; any other error is a server failure. The gateway tells them apart by
that prefix (`refused_input`): a refusal is the caller's 400 and is never retried elsewhere,
since every server would refuse it too.
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
        """`values` as this input's array; texts of a BYTES input are encoded as UTF-8.

        ValueError (naming the input) for a value the dtype cannot hold as it is: a text that is
        not valid Unicode, an integer out of range, a finite number that overflows FP32. numpy
        would otherwise wrap or overflow it silently, and the server would get another value."""
        if not self.is_list and len(values) != 1:
            raise ValueError(f"llm input {self.name!r} is a scalar: give one value, got {len(values)}")
        if self.datatype == "BYTES":
            try:
                encoded = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
            except UnicodeEncodeError as exc:
                raise ValueError(f"llm input {self.name!r} is not valid Unicode text: {exc.reason}") from None
            # Filled element by element so that numpy never splits a `bytes` into characters.
            array = np.empty(len(encoded), dtype=np.object_)
            array[:] = encoded
            return array
        if np.issubdtype(self.dtype, np.integer):
            limits = np.iinfo(self.dtype)  # type: ignore[type-var]  # an integer dtype, checked above
            for value in values:
                if not limits.min <= int(value) <= limits.max:
                    raise ValueError(f"llm input {self.name!r} ({self.datatype}) cannot hold {value!r}")
        with np.errstate(over="raise"):
            try:
                return np.asarray(values, dtype=self.dtype).reshape(-1)
            except FloatingPointError:
                raise ValueError(f"llm input {self.name!r} ({self.datatype}) cannot hold {list(values)}") from None


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

INVALID_INPUT_PREFIX = "invalid input: "


def invalid_input_message(detail: str) -> str:
    """The error message of a refused input (idempotent: a stage's refusal passed on stays one)."""
    return detail if detail.startswith(INVALID_INPUT_PREFIX) else INVALID_INPUT_PREFIX + detail


def refused_input(message: str) -> str | None:
    """What was wrong with the input when `message` is a refusal of it; None for a failure."""
    if message.startswith(INVALID_INPUT_PREFIX):
        return message[len(INVALID_INPUT_PREFIX) :]
    return None


TEXT_OUTPUT = "text_output"  # BYTES [1]: text since the previous response
OUTPUT_TOKEN_IDS = "output_token_ids"  # INT32 [-1]: token ids since the previous response
FINISH_REASON = "finish_reason"  # BYTES [1]: empty until the end (contracts.generation.FINISH_REASONS)
PROMPT_TOKENS = "prompt_tokens"  # INT32 [1]
CACHED_TOKENS = "cached_tokens"  # INT32 [1]
COMPLETION_TOKENS = "completion_tokens"  # INT32 [1]: token ids this server sent so far
# INT32 [1]: tokens the engine wrote past the reply's end (a stop string), never sent or billed
DISCARDED_TOKENS = "discarded_tokens"

LLM_OUTPUT_NAMES: tuple[str, ...] = (
    TEXT_OUTPUT,
    OUTPUT_TOKEN_IDS,
    FINISH_REASON,
    PROMPT_TOKENS,
    CACHED_TOKENS,
    COMPLETION_TOKENS,
    DISCARDED_TOKENS,
)
