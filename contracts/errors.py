"""The one error contract, OpenAI's: `{"error": {"message", "type", "param", "code"}}`, with a
status that says whose fault it is and a message that says what to change.

`type` is one of OpenAI's, chosen by the status (what the official SDKs and clients switch
on); `code` names the particular failure (`invalid_api_key`, `model_not_found`,
`context_length_exceeded`, `rate_limit_exceeded`, ...):

    400 / 409 / 413 / 499  invalid_request_error     401  authentication_error
    403                    permission_error          404  not_found_error
    429                    rate_limit_error          5xx  server_error

Bad input is always a 4xx (FastAPI's 422 becomes 400); a 500 means a bug in the gateway.
These are the error types and messages; gateway/error_handlers.py turns them into responses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, get_args

from contracts.caller_echo import ECHO_CHARS, echoed
from contracts.generation import BackendError, BackendUnavailable
from contracts.schemas import FIELD_HINTS, ErrorType

# OpenAI's error types; anything else a caller names is taken as the error's code.
ERROR_TYPES: frozenset[str] = frozenset(get_args(ErrorType))
_TYPE_BY_STATUS = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}
# The code of an error raised with only a type: what the status says.
_CODE_BY_STATUS = {
    400: "invalid_request",
    401: "invalid_api_key",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    429: "rate_limit_exceeded",
    499: "client_closed_request",
    500: "internal_error",
    502: "backend_error",
    503: "service_unavailable",
}


def error_type_for(status_code: int) -> str:
    """OpenAI's error type for a status."""
    if status_code >= 500:
        return "server_error"
    return _TYPE_BY_STATUS.get(status_code, "invalid_request_error")


def error_kind(status_code: int, name: str, code: str | None = None) -> tuple[str, str]:
    """(type, code) of an error raised as `name` with `status_code`.

    `name` may be one of OpenAI's types (the code then defaults to what the status says) or a
    specific failure such as `model_not_found` (then it is the code, and the type follows the
    status), so every error reads as OpenAI's whichever way it was raised."""
    if name in ERROR_TYPES:
        return name, code or _CODE_BY_STATUS.get(status_code, name)
    return error_type_for(status_code), code or name


class ApiError(Exception):
    """An error the gateway answers with on purpose: `error_type` and `code` as `error_kind`
    settles them."""

    def __init__(
        self,
        status_code: int,
        error_type: str,
        message: str,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_type, self.code = error_kind(status_code, error_type, code)
        self.message = message
        self.param = param
        self.headers = dict(headers or {})

    def detail(self) -> dict[str, Any]:
        """The body's `error` object."""
        return error_detail(self.error_type, self.message, self.param, self.code)


def error_detail(error_type: str, message: str, param: str | None, code: str) -> dict[str, Any]:
    return {"message": message, "type": error_type, "param": param, "code": code}


def invalid_request(message: str, param: str | None = None, code: str = "invalid_request") -> ApiError:
    return ApiError(400, "invalid_request_error", message, param, code=code)


def model_not_found(model_id: str, served: Sequence[str]) -> ApiError:
    return ApiError(
        404,
        "not_found_error",
        f"model {echoed(model_id)} is not served here; use one of: {', '.join(served)} (GET /v1/models)",
        "model",
        code="model_not_found",
    )


def request_not_found(request_id: str) -> ApiError:
    return ApiError(
        404, "not_found_error", f"no request {echoed(request_id)} is in flight", "request_id", code="request_not_found"
    )


def request_conflict(request_id: str, reason: str) -> ApiError:
    """409 for a request id that cannot name this request; `reason` says why and what to do."""
    return ApiError(
        409,
        "invalid_request_error",
        f"request_id {echoed(request_id)} {reason}",
        "request_id",
        {"X-Request-Id": request_id},
        code="request_id_conflict",
    )


def grammar_failed(tokens: int) -> ApiError:
    """400 `grammar_failed` for a reply its grammar gave up on after `tokens` tokens: llguidance
    hit one of its limits as the text grew (a pattern with large repetition counts, say), so the
    text is not complete under the grammar and never will be. Not a `stop`: a reply never claims
    a text it is not. The caller's to change (a simpler schema or pattern), like a grammar the
    edge refuses before any token (that one's code is `invalid_request`); not billed."""
    return ApiError(
        400,
        "invalid_request_error",
        f"the reply could not be completed under its grammar: llguidance gave up after {tokens} tokens "
        "(a limit hit as the text grew, such as a pattern with large repetition counts); the text so far "
        "is not valid under the grammar and is not billed. Simplify the schema or pattern (docs/openai.md, "
        "'Structured outputs')",
        None,
        code="grammar_failed",
    )


def error_payload(exc: BaseException) -> dict[str, Any]:
    """The `{"error": ...}` body for a failure after the response has started (SSE)."""
    if isinstance(exc, ApiError):
        return {"error": exc.detail()}
    if isinstance(exc, BackendUnavailable):
        return {"error": error_detail("server_error", str(exc), None, "backend_unavailable")}
    if isinstance(exc, BackendError):
        return {"error": error_detail("server_error", str(exc), None, "backend_error")}
    return {"error": error_detail("server_error", "the gateway failed; see its log", None, "internal_error")}


# The tags of the tagged unions in request bodies (a chat message's `role`, a response format's
# `type`): pydantic puts the tag in an error's path (`messages.0.tool.tool_call_id`), which
# names no field the caller sent.
MESSAGE_TAGS = frozenset({"system", "developer", "user", "assistant", "tool"})
FORMAT_TAGS = frozenset({"text", "json_object", "json_schema"})


def field_path(loc: Sequence[str | int]) -> list[str]:
    """An error's path as the caller's field names: without `body` and union tags (a message's
    follows a list index, a format's follows `response_format`)."""
    parts: list[str] = []
    previous: str | int | None = None
    for part in loc:
        tag = (isinstance(previous, int) and part in MESSAGE_TAGS) or (
            previous == "response_format" and part in FORMAT_TAGS
        )
        if part != "body" and not tag:
            parts.append(str(part))
        previous = part
    return parts


def describe_validation_errors(errors: Sequence[Any]) -> tuple[str, str | None]:
    """One message for all of pydantic's errors, and the first offending field."""
    messages: list[str] = []
    params: list[str] = []
    for error in errors:
        if error.get("type") == "json_invalid":  # its loc is ("body", offset): no field to name
            messages.append(_invalid_json(error))
            continue
        loc = field_path(error.get("loc", ()))
        field = ".".join(loc)
        messages.append(_describe(error, field, loc[0] if loc else ""))
        if field:
            # A field's path holds the caller's keys (an unknown field, a metadata key): cut too.
            params.append(field if len(field) <= ECHO_CHARS else echoed(field))
    return "; ".join(dict.fromkeys(messages)), (params[0] if params else None)


# OpenAI's codes for what pydantic found; any other kind is an `invalid_value`.
_CODE_BY_KIND = {
    "json_invalid": "invalid_json",
    "missing": "missing_required_parameter",
    "extra_forbidden": "unknown_parameter",
    "model_type": "invalid_type",
    "dict_type": "invalid_type",
}


def validation_error_code(errors: Sequence[Any]) -> str:
    """The code of a validation failure: that of its first error."""
    kind = str(errors[0].get("type", "")) if errors else ""
    return _CODE_BY_KIND.get(kind, "invalid_value")


def _describe(error: Mapping[str, Any], field: str, top_field: str) -> str:
    kind = error.get("type", "")
    if not field:
        return "request body must be a JSON object"
    if kind == "extra_forbidden":
        return f"unknown field {echoed(field)}: remove it (known fields: {', '.join(FIELD_HINTS)})"
    hint = FIELD_HINTS.get(top_field)
    if kind == "missing":
        return f"{echoed(field)} is required" + (f": {hint}" if hint else "")
    got = echoed(error.get("input"))
    reason = str(error.get("msg", "invalid value"))
    if not hint:
        return f"{echoed(field)}: {reason}; got {got}"
    if kind in _SAID_BY_HINT:
        return f"{echoed(field)} must be {hint}; got {got}"
    return f"{echoed(field)} must be {hint}; got {got} ({reason[0].lower()}{reason[1:]})"


def _invalid_json(error: Mapping[str, Any]) -> str:
    """Where the body stops being JSON: the parser's reason and its character offset (FastAPI
    puts the offset where a field's name goes; it names no field, so `param` stays null)."""
    reason = error.get("ctx", {}).get("error", "parse error")
    loc = error.get("loc", ())
    at = f" at character {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
    return f"request body is not valid JSON: {reason}{at}"


def unparsed_body_reason(cause: BaseException | None) -> str | None:
    """Why a JSON body could not be parsed when the parser said no more than that it failed
    (FastAPI's "There was an error parsing the body" hides its cause); None for another cause."""
    if isinstance(cause, UnicodeDecodeError):
        byte = cause.object[cause.start : cause.start + 1].hex()
        where = f"byte 0x{byte} at offset {cause.start} ({cause.reason})"
        return f"request body is not valid UTF-8: {where}; send JSON as UTF-8"
    if isinstance(cause, RecursionError):
        return "request body nests arrays or objects too deeply to parse; nest them less"
    return None


# Error kinds whose pydantic message only repeats what the field's hint already says.
_SAID_BY_HINT = frozenset({"value_error", "literal_error", "bool_type", "string_type"})
