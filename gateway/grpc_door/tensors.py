"""`llm`'s public tensors (docs/tensors.md) ↔ what the gateway runs: a `GenerateBody` in, an
`InflightRequest`'s deltas out.

A request's tensors become the very body `/v1/generate` validates (contracts/schemas.py), so
the door accepts exactly the ranges HTTP does, which are the engine's. What the door refuses
is an `ApiError` 400 whose `param` is the tensor's name (status.py: INVALID_ARGUMENT):

    an input that is not one of DOOR_INPUTS      gateway-only (input_ids, cache_namespace,
                                                 resume_token_ids, cancel_request_id, team) or
                                                 unknown
    a datatype other than the table's            (Triton refuses it too)
    a shape whose size is not its element count  a scalar with other than one element
    raw bytes that do not parse, text not UTF-8  values out of range (GenerateBody's checks)

Responses carry `llm`'s seven outputs as the real server sends them (raw contents, one per
output, in order); a stream's responses also carry the `triton_final_response` parameter.

Which inputs a client may send, the body field each fills, and every tensor's datatype and
shape come from `llm`'s one table (contracts/llm_tensors.py); this file only speaks Triton's
wire forms (typed contents here; raw contents and length-prefixed BYTES through
contracts/triton_wire.py).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from tritonclient.grpc import service_pb2

from contracts.caller_echo import ECHO_CHARS, echoed
from contracts.errors import ApiError, invalid_request
from contracts.generation import Usage
from contracts.llm_tensors import (
    CACHED_TOKENS,
    COMPLETION_TOKENS,
    DISCARDED_TOKENS,
    FINISH_REASON,
    LLM_INPUTS,
    LLM_OUTPUT_NAMES,
    LLM_OUTPUTS,
    OUTPUT_TOKEN_IDS,
    PROMPT_TOKENS,
    TEXT_OUTPUT,
    LlmInput,
    LlmTensor,
)
from contracts.schemas import FIELD_HINTS, GenerateBody
from contracts.triton_wire import raw_contents, raw_numbers, split_bytes

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
# Request parameters tritonclient may send; any other is refused, as HTTP refuses unknown fields.
KNOWN_PARAMETERS = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "triton_enable_empty_final_response"}
)
FINAL_PARAMETER = "triton_final_response"
MODEL_VERSION = "1"
_CONTENTS_FIELD = {"INT32": "int_contents", "INT64": "int64_contents", "FP32": "fp32_contents", "BOOL": "bool_contents"}


@dataclass(frozen=True, slots=True)
class DoorRequest:
    """One inference request, checked: the body to run, how to answer, and the id it came with."""

    body: GenerateBody
    stream: bool  # the `stream` input: False, one response with the whole reply
    outputs: tuple[str, ...]  # the outputs asked for, in `llm`'s order (all when none named)
    request_id: str  # as sent ("" when none: the reply carries the gateway's id)


def parse_request(request: service_pb2.ModelInferRequest) -> DoorRequest:
    """The request's tensors as a validated body; `ApiError` 400 (param: the tensor) otherwise."""
    for name in request.parameters:
        if name not in KNOWN_PARAMETERS:
            raise invalid_request(
                f"request parameter {echoed(name)} is not accepted here", name[:ECHO_CHARS], "unknown_parameter"
            )
    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise invalid_request(f"{len(raw)} raw input contents for {len(request.inputs)} inputs", "raw_input_contents")
    fields: dict[str, Any] = {"model": request.model_name}
    if request.id:
        fields["request_id"] = request.id
    for index, tensor in enumerate(request.inputs):
        spec = DOOR_INPUTS.get(tensor.name)
        if spec is None:
            raise invalid_request(
                f"input {echoed(tensor.name)} is not accepted at the door; inputs: {', '.join(DOOR_INPUTS)}",
                tensor.name[:ECHO_CHARS], "unknown_parameter",
            )  # fmt: skip
        field = body_key(spec)
        if field in fields:
            raise invalid_request(f"input {tensor.name!r} is given twice", tensor.name)
        values = tensor_values(spec, tensor, raw[index] if raw else None)
        fields[field] = values if spec.is_list else values[0]
    stream = bool(fields.pop("stream", True))
    try:
        body = GenerateBody.model_validate(fields)
    except ValidationError as exc:
        raise _invalid_tensors(exc) from None
    asked = {output.name for output in request.outputs}
    unknown = asked - set(LLM_OUTPUT_NAMES)
    if unknown:
        name = sorted(unknown)[0]
        raise invalid_request(f"output {echoed(name)} is not one of: {', '.join(LLM_OUTPUT_NAMES)}", name[:ECHO_CHARS])
    outputs = tuple(name for name in LLM_OUTPUT_NAMES if not asked or name in asked)
    # `triton_enable_empty_final_response` needs nothing more: every reply ends with a response
    # that carries its finish reason and the final flag, as `llm`'s do.
    return DoorRequest(body, stream, outputs, request.id)


def tensor_values(spec: LlmInput, tensor: Any, raw: bytes | None) -> list[Any]:
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


def _raw_values(spec: LlmInput, raw: bytes) -> list[Any] | None:
    if spec.datatype == "BYTES":
        return split_bytes(raw)
    values = raw_numbers(raw, spec.datatype)
    return None if values is None else list(values)


def _content_values(spec: LlmInput, contents: service_pb2.InferTensorContents) -> list[Any]:
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
) -> service_pb2.ModelInferResponse:
    """One `llm` response: `text`/`token_ids` since the previous one, the totals so far, and
    with `final` set (a stream's responses) the `triton_final_response` parameter."""
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
        if spec.name in outputs and spec.name in values:  # log-probabilities: not served at the door yet
            tensor, raw = _output(spec, values[spec.name])
            response.outputs.append(tensor)
            response.raw_output_contents.append(raw)
    if final is not None:
        response.parameters[FINAL_PARAMETER].bool_param = final
    return response
