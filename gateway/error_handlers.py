"""Every failure as the one JSON error shape (contracts/errors.py), with its status counted."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from contracts.errors import ApiError, describe_validation_errors
from contracts.generation import BackendError, BackendUnavailable

logger = logging.getLogger(__name__)


def error_response(
    status_code: int,
    error_type: str,
    message: str,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"type": error_type, "message": message, "param": param}}
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
