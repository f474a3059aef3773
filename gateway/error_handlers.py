"""Every failure as the one JSON error shape (contracts/errors.py), with its status counted.

{"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
           "code": "invalid_value"}}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from config.redis_errors import refused_for_replicas
from contracts.caller_echo import echoed
from contracts.errors import (
    ApiError,
    describe_validation_errors,
    error_detail,
    error_kind,
    error_type_for,
    unparsed_body_reason,
    validation_error_code,
)
from contracts.generation import BackendError, BackendUnavailable
from gateway.allowed_methods import allowed_methods

logger = logging.getLogger(__name__)


def error_response(
    status_code: int,
    error_type: str,
    message: str,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
    code: str | None = None,
) -> JSONResponse:
    """The error body for `status_code`; `error_type` is settled into OpenAI's type and a code
    as `ApiError` settles it (contracts/errors.error_kind)."""
    kind, settled_code = error_kind(status_code, error_type, code)
    body = {"error": error_detail(kind, message, param, settled_code)}
    return JSONResponse(body, status_code=status_code, headers=dict(headers or {}))


def install_error_handlers(app: FastAPI) -> None:
    """Route every failure through the one JSON shape."""

    def count(request: Request, status_code: int, error_type: str) -> None:
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None:
            metrics.errors.labels(status=str(status_code), type=error_type).inc()

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        count(request, exc.status_code, exc.error_type)
        return JSONResponse({"error": exc.detail()}, status_code=exc.status_code, headers=exc.headers)

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        message, param = describe_validation_errors(errors)
        code = validation_error_code(errors)
        content_type = request.headers.get("content-type", "")
        if param is None and "json" not in content_type:
            message = f"send the body as JSON with 'Content-Type: application/json' (got {echoed(content_type)})"
            code = "invalid_content_type"
        count(request, 400, "invalid_request_error")
        return error_response(400, "invalid_request_error", message, param, code=code)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        error_type = error_type_for(exc.status_code)
        count(request, exc.status_code, error_type)
        methods = allowed_methods(request.app.routes, request.scope) if exc.status_code == 405 else []
        if methods:  # Allow: every method the path serves, not only those of the route Starlette tried
            message = f"{echoed(request.method)} is not served at this path; it serves {', '.join(methods)}"
            return error_response(405, error_type, message, None, {**(exc.headers or {}), "Allow": ", ".join(methods)})
        reason = unparsed_body_reason(exc.__cause__) if exc.status_code == 400 else None
        if reason is not None:
            return error_response(400, error_type, reason, None, exc.headers, "invalid_json")
        return error_response(exc.status_code, error_type, str(exc.detail), None, exc.headers)

    async def on_backend_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BackendError)
        count(request, 503 if isinstance(exc, BackendUnavailable) else 502, "server_error")
        if isinstance(exc, BackendUnavailable):
            headers = {"Retry-After": str(exc.retry_after_s)}
            return error_response(503, "server_error", f"{exc}; retry later", None, headers, "backend_unavailable")
        return error_response(502, "server_error", str(exc), code="backend_error")

    async def on_redis_unreachable(request: Request, exc: Exception) -> JSONResponse:
        # Redis restarting or failing over (seconds): the caller retries; it is not a bug here.
        # Before, it was the catch-all's 500 (the chaos run's restart-redis fault).
        logger.warning("redis unreachable on %s %s: %s", request.method, request.url.path, exc)
        count(request, 503, "server_error")
        message = "a store the gateway needs is unreachable for a moment; retry shortly"
        return error_response(503, "server_error", message, None, {"Retry-After": "1"}, "service_unavailable")

    async def on_redis_refusal(request: Request, exc: Exception) -> JSONResponse:
        # NOREPLICAS: a primary cut off from its replica refuses writes (docs/redis.md): for the
        # caller as transient as a failover. Any other refusal is a bug here.
        if refused_for_replicas(exc):
            return await on_redis_unreachable(request, exc)
        return await on_unexpected(request, exc)

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        count(request, 500, "server_error")
        return error_response(500, "server_error", "the gateway failed; see its log", code="internal_error")

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(BackendError, on_backend_error)
    app.add_exception_handler(redis.ConnectionError, on_redis_unreachable)  # BusyLoadingError too
    app.add_exception_handler(redis.TimeoutError, on_redis_unreachable)
    app.add_exception_handler(redis.ResponseError, on_redis_refusal)
    app.add_exception_handler(Exception, on_unexpected)
