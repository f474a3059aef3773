"""Every failure the door answers, as a gRPC status: one table from the gateway's HTTP statuses
(contracts/errors.py) and the backend's failures, so the two doors cannot disagree on whose
fault something is.

    400 bad tensors, a prompt that does not fit  INVALID_ARGUMENT   (names the input)
    401 no key, an unknown or revoked key        UNAUTHENTICATED
    403 another team's model                     PERMISSION_DENIED
    404 unknown model                            NOT_FOUND
    408 the client too slow                      DEADLINE_EXCEEDED
    409 an id reused with another request        ALREADY_EXISTS
    413 larger than a limit of the team          INVALID_ARGUMENT   (never fits: change it)
    429 over share, a limit, the key's caps      RESOURCE_EXHAUSTED + `retry-after` trailer
    499 the client left                          CANCELLED
    503 fleet full past the queue, no server     UNAVAILABLE        + `retry-after` trailer
    502 / 500 a server or the gateway failed     INTERNAL

`retry-after` (seconds) goes in the trailing metadata and in the message, so a client that only
prints the error still learns when to come back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc

from contracts.errors import ApiError
from contracts.generation import BackendError, BackendUnavailable
from gateway.grpc_door.tensors import INPUT_OF_FIELD

logger = logging.getLogger(__name__)

RETRY_AFTER_KEY = "retry-after"
_CODE_BY_STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    409: grpc.StatusCode.ALREADY_EXISTS,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    503: grpc.StatusCode.UNAVAILABLE,
}


@dataclass(frozen=True, slots=True)
class DoorStatus:
    """How the door answers one failure; `http_status` and `error_type` label the errors metric
    as HTTP's error handlers do."""

    code: grpc.StatusCode
    message: str
    retry_after_s: str | None
    http_status: int
    error_type: str

    @property
    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return () if self.retry_after_s is None else ((RETRY_AFTER_KEY, self.retry_after_s),)

    @property
    def stream_message(self) -> str:
        """A stream's `error_message` (no status travels with it): the code, then the message."""
        return f"{self.code.name}: {self.message}"


def door_status(exc: BaseException) -> DoorStatus:
    """The status for `exc`: an `ApiError` by its HTTP status, a backend failure as HTTP's
    error handlers see it, anything else an INTERNAL that says to read the log."""
    if isinstance(exc, ApiError):
        code = _CODE_BY_STATUS.get(exc.status_code)
        if code is None:
            code = grpc.StatusCode.INTERNAL if exc.status_code >= 500 else grpc.StatusCode.INVALID_ARGUMENT
        return _status(code, _with_input(exc), exc.headers.get("Retry-After"), exc.status_code, exc.error_type)
    if isinstance(exc, BackendUnavailable):
        return _status(grpc.StatusCode.UNAVAILABLE, str(exc), str(exc.retry_after_s), 503, "server_error")
    if isinstance(exc, BackendError):
        return _status(grpc.StatusCode.INTERNAL, str(exc), None, 502, "server_error")
    logger.error("the gRPC door failed", exc_info=exc)
    return _status(grpc.StatusCode.INTERNAL, "the gateway failed; see its log", None, 500, "server_error")


def _status(code: grpc.StatusCode, message: str, retry: str | None, http_status: int, error_type: str) -> DoorStatus:
    if retry is not None and "retry after" not in message.lower():
        message = f"{message}; retry after {retry} s"
    return DoorStatus(code, message, retry, http_status, error_type)


def _with_input(exc: ApiError) -> str:
    """The message, naming the input it is about when it does not already."""
    if exc.param is None:
        return exc.message
    name = INPUT_OF_FIELD.get(exc.param, exc.param)
    return exc.message if repr(name) in exc.message else f"{exc.message} (input {name!r})"
