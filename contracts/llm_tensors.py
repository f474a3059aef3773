"""The `llm` model's tensors (docs/tensors.md): the one table every side of the stream reads.

    HTTP    ── router/triton_backend.build_inputs ──▶ Triton ──▶ llm: bls/llm_request.py
            ◀── router/llm_response.parse_response ◀───────────  bls/llm_pipeline.py
    gRPC door (gateway/grpc_door/): a client's tensors ──▶ GenerateBody, by `LlmInput.request_field`;
            deltas ──▶ responses with these outputs' datatypes and shapes

Each tensor's name, Triton datatype, numpy dtype and shape are written here only; each input
also names the request field it carries (GenerationRequest's and GenerateBody's attribute),
and whether only the gateway may send it. model_repository/llm/config.pbtxt declares the same
tensors to Triton; tests/contracts/test_llm_tensors.py holds them all together.

Every request is its own batch (`max_batch_size: 0`), so a scalar is shape [1] and a list is
shape [-1]. BYTES travel as numpy object arrays of UTF-8 `bytes`.

Errors: `llm` answers a request whose input it refuses (a value out of the engine's range, a
prompt token id outside the vocabulary, a prompt that does not fit) with an error whose message
starts with `INVALID_INPUT_PREFIX`, and Triton's INVALID_ARG code; any other error is a server
failure. The gateway tells them apart by that prefix (`refused_input`): a refusal is the
caller's 400 and is never retried elsewhere, since every server would refuse it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class LlmTensor:
    """One tensor of `llm`: its name, its type on the wire and in numpy, and its shape."""

    name: str
    datatype: str  # Triton's wire name: BYTES, INT32, INT64, FP32, BOOL
    dtype: type[np.generic]  # what a client builds the array with
    is_list: bool = False  # shape [-1]; otherwise a scalar, shape [1]
    # Present only in the responses of a request that asked for it (log-probabilities): a
    # request that did not ask pays nothing, on the wire or in the engine.
    when_asked: bool = False
    kind: ClassVar[str] = "output"  # what its errors call it
    # (min, max) of an integer dtype, worked out once: every response's arrays are checked.
    int_range: tuple[int, int] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "int_range", _integer_range(self.dtype))

    @property
    def dims(self) -> list[int]:
        """The shape config.pbtxt declares (and a model's metadata reports): [-1] or [1]."""
        return [-1] if self.is_list else [1]

    def array(self, values: Sequence[str | bytes | int | float | bool]) -> npt.NDArray[Any]:
        """`values` as this tensor's array; texts of a BYTES tensor are encoded as UTF-8.

        ValueError (naming the tensor) for a value the dtype cannot hold as it is: a text that is
        not valid Unicode, an integer out of range, a finite number that overflows FP32. numpy
        would otherwise wrap or overflow it silently, and the server would get another value."""
        what = f"llm {self.kind} {self.name!r}"
        if not self.is_list and len(values) != 1:
            raise ValueError(f"{what} is a scalar: give one value, got {len(values)}")
        if self.datatype == "BYTES":
            try:
                encoded = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
            except UnicodeEncodeError as exc:
                raise ValueError(f"{what} is not valid Unicode text: {exc.reason}") from None
            # Filled element by element so that numpy never splits a `bytes` into characters.
            array = np.empty(len(encoded), dtype=np.object_)
            array[:] = encoded
            return array
        if self.int_range is not None:
            low, high = self.int_range
            for value in values:
                if not low <= int(value) <= high:
                    raise ValueError(f"{what} ({self.datatype}) cannot hold {value!r}")
            return np.asarray(values, dtype=self.dtype).reshape(-1)
        with np.errstate(over="raise"):
            try:
                return np.asarray(values, dtype=self.dtype).reshape(-1)
            except FloatingPointError:
                raise ValueError(f"{what} ({self.datatype}) cannot hold {list(values)}") from None


def _integer_range(dtype: type[np.generic]) -> tuple[int, int] | None:
    """The range of an integer dtype; None for another."""
    if not np.issubdtype(dtype, np.integer):
        return None
    info = np.iinfo(dtype)  # type: ignore[type-var]  # an integer dtype, checked above
    return int(info.min), int(info.max)


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmInput(LlmTensor):
    """One input of `llm`, and the request field it carries."""

    kind: ClassVar[str] = "input"
    request_field: str  # the attribute of GenerationRequest and GenerateBody (`stream`: the body's only)
    required: bool = False  # Triton refuses a request without it, before `llm` runs
    gateway_only: bool = False  # set by the gateway alone: the gRPC door refuses it from a client


# The prompt, as text or as its token ids: a request carries exactly one of them (`llm` refuses
# neither and both). The gateway, which has tokenized the prompt for its context check, sends the
# ids, so the server never encodes it again; a direct caller of Triton may send either, and `llm`
# checks ids against its tokenizer's vocabulary. Gateway-only at the door: the gateway encodes
# every prompt itself (the context check, the KV lease, routing), so a client's ids would only be
# a second account of the prompt to reconcile with the first.
TEXT_INPUT = LlmInput("text_input", "BYTES", np.object_, request_field="prompt")
INPUT_IDS = LlmInput("input_ids", "INT32", np.int32, is_list=True, request_field="prompt_token_ids", gateway_only=True)
MAX_TOKENS = LlmInput("max_tokens", "INT32", np.int32, request_field="max_tokens", required=True)
STOP = LlmInput("stop", "BYTES", np.object_, is_list=True, request_field="stop")
STREAM = LlmInput("stream", "BOOL", np.bool_, request_field="stream")
REQUEST_CLASS = LlmInput("request_class", "BYTES", np.object_, request_field="request_class")
TEMPERATURE = LlmInput("temperature", "FP32", np.float32, request_field="temperature")
TOP_P = LlmInput("top_p", "FP32", np.float32, request_field="top_p")
TOP_K = LlmInput("top_k", "INT32", np.int32, request_field="top_k")
SEED = LlmInput("seed", "INT64", np.int64, request_field="seed")
IGNORE_EOS = LlmInput("ignore_eos", "BOOL", np.bool_, request_field="ignore_eos")
# A resumed reply's tokens (failover) and the team's prefix-cache namespace: a client that set
# them could splice text into a reply or read another team's cache.
RESUME_TOKEN_IDS = LlmInput(
    "resume_token_ids", "INT32", np.int32, is_list=True, request_field="resume_token_ids", gateway_only=True
)
CACHE_NAMESPACE = LlmInput("cache_namespace", "BYTES", np.object_, request_field="cache_namespace", gateway_only=True)
# Structured output and log-probabilities (docs/openai.md). `guided_grammar`: the grammar the reply
# follows, in llguidance's Lark dialect (contracts/guided_grammar.py builds it from a response
# format); `logprobs`: each generated token's log-probability and its k most likely alternatives
# (0..20); `prompt_logprobs`: the same for the prompt's tokens (completions' `echo`). Gateway-only
# until /v1/generate's body has the fields: the door then takes them like the others.
GUIDED_GRAMMAR = LlmInput("guided_grammar", "BYTES", np.object_, request_field="guided_grammar", gateway_only=True)
LOGPROBS = LlmInput("logprobs", "INT32", np.int32, request_field="logprobs", gateway_only=True)
PROMPT_LOGPROBS = LlmInput("prompt_logprobs", "INT32", np.int32, request_field="prompt_logprobs", gateway_only=True)
# The caller's first-token target in ms from arrival (`x-slo-ttft-ms`): the server orders waiting
# work within its class by the deadline it makes (earliest first).
SLO_TTFT_MS = LlmInput("slo_ttft_ms", "INT32", np.int32, request_field="slo_ttft_ms")

# In config.pbtxt's order.
LLM_INPUTS: tuple[LlmInput, ...] = (
    TEXT_INPUT,
    INPUT_IDS,
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
    GUIDED_GRAMMAR,
    LOGPROBS,
    PROMPT_LOGPROBS,
    SLO_TTFT_MS,
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


TEXT_OUTPUT = LlmTensor("text_output", "BYTES", np.object_)  # text since the previous response
OUTPUT_TOKEN_IDS = LlmTensor("output_token_ids", "INT32", np.int32, is_list=True)  # token ids since then
FINISH_REASON = LlmTensor("finish_reason", "BYTES", np.object_)  # "" until the end (generation.FINISH_REASONS)
PROMPT_TOKENS = LlmTensor("prompt_tokens", "INT32", np.int32)
CACHED_TOKENS = LlmTensor("cached_tokens", "INT32", np.int32)
COMPLETION_TOKENS = LlmTensor("completion_tokens", "INT32", np.int32)  # token ids this server sent so far
# Tokens the engine wrote past the reply's end (a stop string), never sent or billed.
DISCARDED_TOKENS = LlmTensor("discarded_tokens", "INT32", np.int32)
# Log-probabilities (engine/logprobs.py says of which distribution), only when asked. Of the
# response's `output_token_ids`, one each; their alternatives k per token (k = `logprobs`), most
# likely first, flattened: token i's are [i*k, (i+1)*k). Never below -9999.0 (OpenAI's floor).
OUTPUT_TOKEN_LOGPROBS = LlmTensor("output_token_logprobs", "FP32", np.float32, is_list=True, when_asked=True)
OUTPUT_TOP_LOGPROB_IDS = LlmTensor("output_top_logprob_ids", "INT32", np.int32, is_list=True, when_asked=True)
OUTPUT_TOP_LOGPROBS = LlmTensor("output_top_logprobs", "FP32", np.float32, is_list=True, when_asked=True)
# Of the prompt's tokens 1..n-1 (the first has none), k = `prompt_logprobs` alternatives each; in
# one response, the first (before any reply token); a resumed reply's are those of its prompt.
PROMPT_TOKEN_LOGPROBS = LlmTensor("prompt_token_logprobs", "FP32", np.float32, is_list=True, when_asked=True)
PROMPT_TOP_LOGPROB_IDS = LlmTensor("prompt_top_logprob_ids", "INT32", np.int32, is_list=True, when_asked=True)
PROMPT_TOP_LOGPROBS = LlmTensor("prompt_top_logprobs", "FP32", np.float32, is_list=True, when_asked=True)
OUTPUT_LOGPROB_TENSORS = (OUTPUT_TOKEN_LOGPROBS, OUTPUT_TOP_LOGPROB_IDS, OUTPUT_TOP_LOGPROBS)
PROMPT_LOGPROB_TENSORS = (PROMPT_TOKEN_LOGPROBS, PROMPT_TOP_LOGPROB_IDS, PROMPT_TOP_LOGPROBS)

# In config.pbtxt's order: every response carries all of them but the `when_asked` ones.
LLM_OUTPUTS: tuple[LlmTensor, ...] = (
    TEXT_OUTPUT,
    OUTPUT_TOKEN_IDS,
    FINISH_REASON,
    PROMPT_TOKENS,
    CACHED_TOKENS,
    COMPLETION_TOKENS,
    DISCARDED_TOKENS,
    *OUTPUT_LOGPROB_TENSORS,
    *PROMPT_LOGPROB_TENSORS,
)
LLM_OUTPUT_NAMES: tuple[str, ...] = tuple(spec.name for spec in LLM_OUTPUTS)
# The outputs every response carries.
LLM_ALWAYS_OUTPUT_NAMES: tuple[str, ...] = tuple(spec.name for spec in LLM_OUTPUTS if not spec.when_asked)
