"""The one error contract: `{"error": {"type", "message", "param"}}` with a status that says
whose fault it is, and a message that says what to change.

Bad input is always a 4xx (FastAPI's 422 becomes 400); a 500 means a bug in the gateway.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway.backend import BackendError, BackendUnavailable
from gateway.schemas import FIELD_HINTS

logger = logging.getLogger(__name__)


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


def error_response(
    status_code: int,
    error_type: str,
    message: str,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"type": error_type, "message": message, "param": param}}
    return JSONResponse(body, status_code=status_code, headers=dict(headers or {}))


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


def install_error_handlers(app: FastAPI) -> None:
    """Route every failure through the one JSON shape."""

    def count(request: Request, status_code: int, error_type: str) -> None:
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None:
            metrics.errors.labels(status=str(status_code), type=error_type).inc()

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        count(request, exc.status_code, exc.error_type)
        return error_response(exc.status_code, exc.error_type, exc.message, exc.param, exc.headers)

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        message, param = describe_validation_errors(exc.errors())
        content_type = request.headers.get("content-type", "")
        if param is None and "json" not in content_type:
            message = f"send the body as JSON with 'Content-Type: application/json' (got {content_type!r})"
        count(request, 400, "invalid_request_error")
        return error_response(400, "invalid_request_error", message, param)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        error_type = "not_found" if exc.status_code == 404 else "http_error"
        count(request, exc.status_code, error_type)
        return error_response(exc.status_code, error_type, str(exc.detail), None, exc.headers)

    async def on_backend_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BackendError)
        if isinstance(exc, BackendUnavailable):
            count(request, 503, "backend_unavailable")
            headers = {"Retry-After": str(exc.retry_after_s)}
            return error_response(503, "backend_unavailable", f"{exc}; retry later", None, headers)
        count(request, 502, "backend_error")
        return error_response(502, "backend_error", str(exc))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        count(request, 500, "internal_error")
        return error_response(500, "internal_error", "the gateway failed; see its log")

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(BackendError, on_backend_error)
    app.add_exception_handler(Exception, on_unexpected)
