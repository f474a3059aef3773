"""The one error contract: `{"error": {"type", "message", "param"}}` with a status that says
whose fault it is, and a message that says what to change.

Bad input is always a 4xx (FastAPI's 422 becomes 400); a 500 means a bug in the gateway.
These are the error types and messages; gateway/error_handlers.py turns them into responses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contracts.generation import BackendError, BackendUnavailable
from contracts.schemas import FIELD_HINTS


class ApiError(Exception):
    """An error the gateway answers with on purpose."""

    def __init__(
        self,
        status_code: int,
        error_type: str,
        message: str,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_type = error_type
        self.message = message
        self.param = param
        self.headers = dict(headers or {})


def invalid_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, "invalid_request_error", message, param)


def model_not_found(model_id: str, served: Sequence[str]) -> ApiError:
    return ApiError(
        404,
        "model_not_found",
        f"model {model_id!r} is not served here; use one of: {', '.join(served)} (GET /v1/models)",
        "model",
    )


def request_not_found(request_id: str) -> ApiError:
    return ApiError(404, "request_not_found", f"no request {request_id!r} is in flight", "request_id")


def request_conflict(request_id: str, reason: str) -> ApiError:
    """409 for a request id that cannot name this request; `reason` says why and what to do."""
    return ApiError(
        409, "conflict_error", f"request_id {request_id!r} {reason}", "request_id", {"X-Request-Id": request_id}
    )


def error_payload(exc: BaseException) -> dict[str, Any]:
    """The `{"error": ...}` body for a failure after the response has started (SSE)."""
    if isinstance(exc, BackendUnavailable):
        detail = {"type": "backend_unavailable", "message": str(exc), "param": None}
    elif isinstance(exc, BackendError):
        detail = {"type": "backend_error", "message": str(exc), "param": None}
    else:
        detail = {"type": "internal_error", "message": "the gateway failed; see its log", "param": None}
    return {"error": detail}


def describe_validation_errors(errors: Sequence[Any]) -> tuple[str, str | None]:
    """One message for all of pydantic's errors, and the first offending field."""
    messages: list[str] = []
    params: list[str] = []
    for error in errors:
        loc = [str(part) for part in error.get("loc", ()) if part != "body"]
        field = ".".join(loc)
        messages.append(_describe(error, field, loc[0] if loc else ""))
        if field:
            params.append(field)
    return "; ".join(dict.fromkeys(messages)), (params[0] if params else None)


def _describe(error: Mapping[str, Any], field: str, top_field: str) -> str:
    kind = error.get("type", "")
    if kind == "json_invalid":
        return f"request body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})"
    if not field:
        return "request body must be a JSON object"
    if kind == "extra_forbidden":
        return f"unknown field {field!r}: remove it (known fields: {', '.join(FIELD_HINTS)})"
    hint = FIELD_HINTS.get(top_field)
    if kind == "missing":
        return f"{field!r} is required" + (f": {hint}" if hint else "")
    got = _shorten(repr(error.get("input")))
    reason = str(error.get("msg", "invalid value"))
    if not hint:
        return f"{field!r}: {reason}; got {got}"
    if kind in _SAID_BY_HINT:
        return f"{field!r} must be {hint}; got {got}"
    return f"{field!r} must be {hint}; got {got} ({reason[0].lower()}{reason[1:]})"


# Error kinds whose pydantic message only repeats what the field's hint already says.
_SAID_BY_HINT = frozenset({"value_error", "literal_error", "bool_type", "string_type"})


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
