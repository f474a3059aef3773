"""`llm`'s public tensors (docs/tensors.md) ↔ what the gateway runs: a `GenerateBody` in, an
`InflightRequest`'s deltas out.

A request's tensors become the very body `/v1/generate` validates (contracts/schemas.py), so
the door accepts exactly the ranges HTTP does, which are the engine's. What the door refuses
is an `ApiError` 400 whose `param` is the tensor's name (status.py: INVALID_ARGUMENT):

    an input that is not one of DOOR_INPUTS      gateway-only (input_ids, cache_namespace,
    or TensorRT-LLM's (trtllm_tensors.py)        resume_token_ids, cancel_request_id, team) or
                                                 unknown
    a datatype other than the table's            (Triton refuses it too)
    a shape whose size is not its element count  a scalar with other than one element
    raw bytes that do not parse, text not UTF-8  values out of range (GenerateBody's checks)

Responses carry `llm`'s seven outputs as the real server sends them (raw contents, one per
output, in order), and TensorRT-LLM's two log-probability outputs when `return_log_probs` asked
for them; a stream's responses also carry the `triton_final_response` parameter. A model
version other than the door's one is NOT_FOUND, as Triton answers it.

Which inputs a client may send, the body field each fills, and every tensor's datatype and
shape come from `llm`'s one table (contracts/llm_tensors.py); this file only speaks Triton's
wire forms (typed contents here; raw contents and length-prefixed BYTES through
contracts/triton_wire.py).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError
from tritonclient.grpc import service_pb2

from contracts.caller_echo import ECHO_CHARS, echoed
from contracts.errors import ApiError, invalid_request
from contracts.generation import RequestClass, Usage
from contracts.llm_tensors import (
    CACHED_TOKENS,
    COMPLETION_TOKENS,
    DISCARDED_TOKENS,
    FINISH_REASON,
    LLM_ALWAYS_OUTPUT_NAMES,
    LLM_INPUTS,
    LLM_OUTPUTS,
    OUTPUT_TOKEN_IDS,
    PROMPT_TOKENS,
    TEXT_OUTPUT,
    LlmInput,
    LlmTensor,
)
from contracts.schemas import FIELD_HINTS, GenerateBody
from contracts.service_tier import CLASS_OF_TIER, SERVICE_TIERS
from contracts.triton_wire import raw_contents, raw_numbers, split_bytes
from gateway.grpc_door.trtllm_tensors import (
    RETURN_LOG_PROBS,
    TRTLLM_INPUTS,
    TRTLLM_OUTPUTS,
    Guide,
    guide_from,
    log_prob_arrays,
)

# `llm`'s inputs a team may send (all but the gateway-only ones), by name.
DOOR_INPUTS: dict[str, LlmInput] = {spec.name: spec for spec in LLM_INPUTS if not spec.gateway_only}


def body_key(spec: LlmInput) -> str:
    """The key of `spec`'s field in a GenerateBody as it is validated (its alias: `class`)."""
    return GenerateBody.model_fields[spec.request_field].alias or spec.request_field


# The body's keys as the door's caller names them: its tensors, and the request's own fields.
INPUT_OF_FIELD = {body_key(spec): name for name, spec in DOOR_INPUTS.items()} | {
    "model": "model_name",
    "request_id": "id",
}
# The level of service (docs/tiers.md) as a string parameter: auto, default, flex, priority or
# batch (`auto`: the team's default); the `request_class` input names the same by class.
SERVICE_TIER_PARAMETER = "service_tier"
# Request parameters tritonclient may send; any other is refused, as HTTP refuses unknown fields.
KNOWN_PARAMETERS = frozenset(
    {
        "sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "triton_enable_empty_final_response",
        SERVICE_TIER_PARAMETER,
    }
)  # fmt: skip
FINAL_PARAMETER = "triton_final_response"
MODEL_VERSION = "1"
# What the door answers: `llm`'s outputs every response carries, then TensorRT-LLM's
# log-probabilities (only with `return_log_probs`). `llm`'s own log-probability outputs are
# the gateway's (they need its `logprobs` input): the door neither declares nor sends them.
DOOR_OUTPUT_NAMES: tuple[str, ...] = LLM_ALWAYS_OUTPUT_NAMES + tuple(spec.name for spec in TRTLLM_OUTPUTS)
_LOG_PROB_OUTPUT_NAMES = frozenset(spec.name for spec in TRTLLM_OUTPUTS)
_CONTENTS_FIELD = {"INT32": "int_contents", "INT64": "int64_contents", "FP32": "fp32_contents", "BOOL": "bool_contents"}


class TensorSpec(Protocol):
    """What reading an input needs of its declaration (`llm`'s or TensorRT-LLM's)."""

    @property
    def name(self) -> str: ...
    @property
    def datatype(self) -> str: ...
    @property
    def is_list(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class DoorRequest:
    """One inference request, checked: the body to run, how to answer, and the id it came with."""

    body: GenerateBody
    stream: bool  # the `stream` input: False, one response with the whole reply
    outputs: tuple[str, ...]  # the outputs asked for, in DOOR_OUTPUT_NAMES' order (all when none named)
    request_id: str  # as sent ("" when none: the reply carries the gateway's id)
    guide: Guide | None = None  # TensorRT-LLM's guided decoding (trtllm_tensors.py)
    log_probs: bool = False  # `return_log_probs`: each token's log-probability in the responses


def parse_request(request: service_pb2.ModelInferRequest) -> DoorRequest:
    """The request's tensors as a validated body; `ApiError` 400 (param: the tensor) otherwise."""
    for name in request.parameters:
        if name not in KNOWN_PARAMETERS:
            raise invalid_request(
                f"request parameter {echoed(name)} is not accepted here", name[:ECHO_CHARS], "unknown_parameter"
            )
    if request.model_version not in ("", MODEL_VERSION):
        raise unknown_version(request.model_name, request.model_version)
    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise invalid_request(f"{len(raw)} raw input contents for {len(request.inputs)} inputs", "raw_input_contents")
    fields: dict[str, Any] = {"model": request.model_name}
    if request.id:
        fields["request_id"] = request.id
    trtllm: dict[str, Any] = {}
    for index, tensor in enumerate(request.inputs):
        spec: TensorSpec | None = DOOR_INPUTS.get(tensor.name) or TRTLLM_INPUTS.get(tensor.name)
        if spec is None:
            raise invalid_request(
                f"input {echoed(tensor.name)} is not accepted at the door; inputs: "
                f"{', '.join([*DOOR_INPUTS, *TRTLLM_INPUTS])}",
                tensor.name[:ECHO_CHARS], "unknown_parameter",
            )  # fmt: skip
        into, key = (trtllm, spec.name) if spec.name in TRTLLM_INPUTS else (fields, body_key(DOOR_INPUTS[spec.name]))
        if key in into:
            raise invalid_request(f"input {tensor.name!r} is given twice", tensor.name)
        values = tensor_values(spec, tensor, raw[index] if raw else None)
        into[key] = values if spec.is_list else values[0]
    tier_class = _tier_class(request)
    if tier_class is not None and fields.setdefault("class", tier_class) != tier_class:
        raise invalid_request(
            f"parameter {SERVICE_TIER_PARAMETER!r} and input 'request_class' disagree; send one",
            SERVICE_TIER_PARAMETER,
        )
    stream = bool(fields.pop("stream", True))
    try:
        body = GenerateBody.model_validate(fields)
    except ValidationError as exc:
        raise _invalid_tensors(exc) from None
    guide = guide_from(trtllm.get("guided_decoding_guide_type"), trtllm.get("guided_decoding_guide"))
    log_probs = bool(trtllm.get(RETURN_LOG_PROBS.name, False))
    outputs = _outputs({output.name for output in request.outputs}, log_probs=log_probs)
    # `triton_enable_empty_final_response` needs nothing more: every reply ends with a response
    # that carries its finish reason and the final flag, as `llm`'s do.
    return DoorRequest(body, stream, outputs, request.id, guide, log_probs)


def _tier_class(request: service_pb2.ModelInferRequest) -> RequestClass | None:
    """The class of the request's `service_tier` parameter; None without one (or `auto`)."""
    if SERVICE_TIER_PARAMETER not in request.parameters:
        return None
    parameter = request.parameters[SERVICE_TIER_PARAMETER]
    tier = parameter.string_param if parameter.WhichOneof("parameter_choice") == "string_param" else None
    if tier == "auto":
        return None
    for name in SERVICE_TIERS:
        if tier == name:
            return CLASS_OF_TIER[name]
    raise invalid_request(
        f"parameter {SERVICE_TIER_PARAMETER!r} must be a string, one of auto, {', '.join(SERVICE_TIERS)}; "
        f"got {echoed(str(tier) if tier is not None else 'a non-string')}",
        SERVICE_TIER_PARAMETER,
    )


def unknown_version(model_name: str, version: str) -> ApiError:
    """A version the door does not serve: NOT_FOUND, as Triton answers for a version it lacks."""
    return ApiError(
        404, "not_found_error",
        f"model {echoed(model_name)} has no version {echoed(version)}; the door serves version {MODEL_VERSION}",
        "model_version", code="model_not_found",
    )  # fmt: skip


def _outputs(asked: set[str], *, log_probs: bool) -> tuple[str, ...]:
    """The outputs to send, in DOOR_OUTPUT_NAMES' order: those asked for, or every one that
    applies (log-probabilities only with `return_log_probs`, which asking for them needs)."""
    unknown = asked - set(DOOR_OUTPUT_NAMES)
    if unknown:
        name = sorted(unknown)[0]
        raise invalid_request(f"output {echoed(name)} is not one of: {', '.join(DOOR_OUTPUT_NAMES)}", name[:ECHO_CHARS])
    if not log_probs and asked & _LOG_PROB_OUTPUT_NAMES:
        name = sorted(asked & _LOG_PROB_OUTPUT_NAMES)[0]
        raise invalid_request(f"output {name!r} needs input {RETURN_LOG_PROBS.name!r} true", RETURN_LOG_PROBS.name)
    if asked:
        return tuple(name for name in DOOR_OUTPUT_NAMES if name in asked)
    return tuple(name for name in DOOR_OUTPUT_NAMES if log_probs or name not in _LOG_PROB_OUTPUT_NAMES)


def tensor_values(spec: TensorSpec, tensor: Any, raw: bytes | None) -> list[Any]:
    """One input's values as Python values (texts decoded), checked against the table."""
    name = tensor.name
    if tensor.datatype != spec.datatype:
        raise invalid_request(f"input {name!r} must be {spec.datatype}, got {tensor.datatype or 'none'}", name)
    values = _raw_values(spec, raw) if raw is not None else _content_values(spec, tensor.contents)
    if values is None:
        raise invalid_request(f"input {name!r}: its {spec.datatype} contents do not parse", name)
    size = math.prod(tensor.shape) if tensor.shape else 0
    if any(dim < 0 for dim in tensor.shape) or size != len(values):
        raise invalid_request(f"input {name!r}: shape {list(tensor.shape)} but {len(values)} elements", name)
    if not spec.is_list and len(values) != 1:
        raise invalid_request(f"input {name!r} is a scalar: give one element (shape [1]), got {len(values)}", name)
    if spec.datatype != "BYTES":
        return values
    try:
        return [value.decode("utf-8") for value in values]
    except UnicodeDecodeError as exc:
        raise invalid_request(f"input {name!r} is not valid UTF-8 text: {exc.reason}", name) from None


def _raw_values(spec: TensorSpec, raw: bytes) -> list[Any] | None:
    if spec.datatype == "BYTES":
        return split_bytes(raw)
    values = raw_numbers(raw, spec.datatype)
    return None if values is None else list(values)


def _content_values(spec: TensorSpec, contents: service_pb2.InferTensorContents) -> list[Any]:
    if spec.datatype == "BYTES":
        return list(contents.bytes_contents)
    return list(getattr(contents, _CONTENTS_FIELD[spec.datatype]))


def _invalid_tensors(exc: ValidationError) -> ApiError:
    """GenerateBody's complaint in the door's words: the tensor's name and what it must hold."""
    errors = exc.errors()
    messages = []
    for error in errors:
        field = str(error["loc"][0]) if error.get("loc") else ""
        name = INPUT_OF_FIELD.get(field, field)
        if error.get("type") == "missing":
            messages.append(f"input {name!r} is required")
            continue
        hint = FIELD_HINTS.get(field)
        messages.append(f"input {name!r} must be {hint}" if hint else f"input {name!r}: {error.get('msg')}")
    first = str(errors[0]["loc"][0]) if errors and errors[0].get("loc") else ""
    return invalid_request("; ".join(dict.fromkeys(messages)), INPUT_OF_FIELD.get(first, first) or None)


def _output(spec: LlmTensor, values: Sequence[str | int]) -> tuple[Any, bytes]:
    """One output tensor of the table's datatype and shape, and its raw contents."""
    array = spec.array(values)
    raw = raw_contents(array, spec.datatype)
    tensor = service_pb2.ModelInferResponse.InferOutputTensor(
        name=spec.name, datatype=spec.datatype, shape=list(array.shape)
    )
    return tensor, raw


def infer_response(
    model_name: str,
    request_id: str,
    outputs: Collection[str],
    *,
    text: str,
    token_ids: Sequence[int],
    finish_reason: str,
    usage: Usage,
    completion_tokens: int,
    final: bool | None,
    log_probs: tuple[Sequence[float], float] | None = None,
) -> service_pb2.ModelInferResponse:
    """One `llm` response: `text`/`token_ids` since the previous one, the totals so far, and
    with `final` set (a stream's responses) the `triton_final_response` parameter. `log_probs`:
    the log-probabilities of `token_ids` and the reply's sum so far, sent when `outputs` has
    TensorRT-LLM's outputs for them."""
    values: Mapping[str, Sequence[str | int]] = {
        TEXT_OUTPUT.name: [text],
        OUTPUT_TOKEN_IDS.name: token_ids,
        FINISH_REASON.name: [finish_reason],
        PROMPT_TOKENS.name: [usage.prompt_tokens],
        CACHED_TOKENS.name: [usage.cached_tokens],
        COMPLETION_TOKENS.name: [completion_tokens],
        DISCARDED_TOKENS.name: [usage.discarded_tokens],
    }
    response = service_pb2.ModelInferResponse(model_name=model_name, model_version=MODEL_VERSION, id=request_id)
    for spec in LLM_OUTPUTS:
        if spec.name in outputs and spec.name in values:  # `llm`'s log-probabilities: the gateway's
            tensor, raw = _output(spec, values[spec.name])
            response.outputs.append(tensor)
            response.raw_output_contents.append(raw)
    if log_probs is not None:
        for door_spec, array in log_prob_arrays(*log_probs):
            if door_spec.name in outputs:
                response.outputs.append(
                    service_pb2.ModelInferResponse.InferOutputTensor(
                        name=door_spec.name, datatype=door_spec.datatype, shape=list(array.shape)
                    )
                )
                response.raw_output_contents.append(raw_contents(array, door_spec.datatype))
    if final is not None:
        response.parameters[FINAL_PARAMETER].bool_param = final
    return response
