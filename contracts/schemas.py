"""Request and response bodies of the HTTP API (pydantic, at the edge only).

Requests are strict (no "5" for 5, no 1.0 for 1, no true for 1) and refuse unknown fields, so
a typo such as `temprature` is a 400 that names it rather than a silently ignored setting.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from contracts.field_checks import (
    MAX_STOP_CHARS,
    MAX_STOP_STRINGS,
    MIN_TOP_P,
    UnicodeChecked,
    stop_lengths,
    top_p_floor,
)
from contracts.generation import RequestClass
from contracts.openai_wire.response_format import ResponseFormat

INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# The admin key acts for a team by naming it here (the bulk dispatcher does, for each entry).
TEAM_HEADER = "X-Switchyard-Team"

RequestId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")]


def _stop_as_list(value: object) -> object:
    """`stop` may be one string, a list of them or null; the model always holds a list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return value
    raise ValueError(f"must be a string or a list of at most {MAX_STOP_STRINGS} strings")


# One stop string as the document shows it (each form of `stop` holds the same ones). An empty
# stop string is refused, not ignored: it would match everywhere, and a client that sends one
# has a bug worth hearing about (the single-string form and the list's items alike).
_StopText = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]
StopList = Annotated[
    list[Annotated[str, Field(min_length=1)]],
    BeforeValidator(
        _stop_as_list,
        json_schema_input_type=_StopText | Annotated[list[_StopText], Field(max_length=MAX_STOP_STRINGS)] | None,
    ),
    Field(max_length=MAX_STOP_STRINGS),
    AfterValidator(stop_lengths),
]
"""`stop` of every generation body: a string or a list of at most MAX_STOP_STRINGS strings of
1..MAX_STOP_CHARS characters, or null (none)."""

# `top_p` from the smallest positive FP32 to 1: below it, the engine's FP32 tensor holds 0 (which
# it refuses). The document's `minimum` is this same number, so what it admits the gateway takes
# and what it refuses the gateway refuses (with a message that names the number).
TopP = Annotated[
    float,
    Field(le=1.0),
    AfterValidator(top_p_floor),
    WithJsonSchema({"type": "number", "minimum": MIN_TOP_P, "maximum": 1.0}),
]


# A latency target in ms: at most an hour (the servers' `slo_ttft_ms` input takes the same range).
MAX_SLO_MS = 3_600_000
SloMs = Annotated[int, Field(ge=1, le=MAX_SLO_MS)]


class GenerateBody(UnicodeChecked):
    """POST /v1/generate. Ranges are the engine's after conversion to each tensor's dtype
    (contracts/field_checks.py), so what passes here no model server refuses."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

    model: Annotated[str, Field(min_length=1)]
    prompt: Annotated[str, Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1, le=INT32_MAX)]
    stop: StopList = Field(default_factory=list)
    request_class: RequestClass | None = Field(None, alias="class")  # None: the team's default_class
    stream: bool = False
    request_id: RequestId | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: TopP | None = None
    top_k: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    seed: Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)] | None = None
    ignore_eos: bool = False
    # The reply held to a JSON schema or object, as OpenAI's field says (contracts/openai_wire/response_format.py).
    response_format: ResponseFormat | None = None
    # Latency targets (docs/tiers.md), as the headers x-slo-ttft-ms / x-slo-tpot-ms give them.
    slo_ttft_ms: SloMs | None = None
    slo_tpot_ms: SloMs | None = None


class UsageBody(BaseModel):
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int


class GenerateResponse(BaseModel):
    """The whole reply of a non-streamed POST /v1/generate."""

    request_id: str
    model: str
    text: str
    stop_reason: str
    usage: UsageBody


class CancelResponse(BaseModel):
    """DELETE /v1/generate/{request_id}: `cancelled`, or `completed` if it ended first."""

    request_id: str
    status: Literal["cancelled", "completed", "failed"]
    usage: UsageBody


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int  # unix time the model was built (contracts/catalog.py)
    owned_by: str = "switchyard"
    max_context_tokens: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class PoolStatus(BaseModel):
    pool_id: str
    model_id: str
    ready: bool
    detail: str


class ReadinessBody(BaseModel):
    status: Literal["ready", "not_ready"]
    pools: list[PoolStatus]
    # A gateway that cannot reach Redis can admit nothing (keys, leases, request records):
    # not ready, so a load balancer sends its clients to the others (a host cut from Redis).
    redis: Literal["reachable", "unreachable"] = "reachable"


# OpenAI's error types, by status in contracts/errors.py.
ErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "rate_limit_error",
    "server_error",
]


class ErrorDetail(BaseModel):
    """OpenAI's error object: `type` one of OpenAI's, `code` the particular failure."""

    message: str
    type: ErrorType
    param: str | None
    code: str


class ErrorBody(BaseModel):
    """Every error the gateway returns, whatever the status."""

    error: ErrorDetail


def error_responses(*codes: int) -> dict[int | str, dict[str, object]]:
    """OpenAPI `responses` for routes that answer these statuses with an ErrorBody."""
    return {code: {"model": ErrorBody} for code in codes}


# What a valid value looks like, per request field: validation errors quote these so a 400
# says what to send instead, not only what was wrong.
FIELD_HINTS: dict[str, str] = {
    "model": "a model id (a string) from GET /v1/models",
    "prompt": "a non-empty string",
    "max_tokens": "an integer >= 1, the most completion tokens to generate",
    "stop": f"a string or a list of at most {MAX_STOP_STRINGS} strings of 1-{MAX_STOP_CHARS} characters",
    "class": "'interactive' or 'bulk'",
    "stream": "true or false",
    "request_id": "1-128 characters from A-Z, a-z, 0-9 and . _ : -",
    "temperature": "a number from 0 to 2",
    "top_p": f"a number from {MIN_TOP_P!r} (the smallest positive 32-bit float) to 1",
    "top_k": f"an integer from 0 (off) to {INT32_MAX}",
    "seed": "a 64-bit integer",
    "ignore_eos": "true or false",
    "response_format": '{"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": '
    '{"name", "schema", "strict"}}',
}
