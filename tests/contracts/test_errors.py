"""Every error reads as OpenAI's: one of its types, chosen by the status, and a code."""

from __future__ import annotations

import pytest

from contracts.errors import ApiError, error_kind, error_payload, invalid_request, model_not_found, request_conflict
from contracts.generation import BackendError, BackendUnavailable


@pytest.mark.parametrize(
    ("status", "name", "kind"),
    [
        (400, "invalid_request_error", ("invalid_request_error", "invalid_request")),
        (401, "authentication_error", ("authentication_error", "invalid_api_key")),
        (403, "permission_error", ("permission_error", "permission_denied")),
        (404, "not_found_error", ("not_found_error", "not_found")),
        (413, "request_too_large", ("invalid_request_error", "request_too_large")),
        (429, "rate_limit_error", ("rate_limit_error", "rate_limit_exceeded")),
        (503, "service_unavailable", ("server_error", "service_unavailable")),
        (499, "client_closed_request", ("invalid_request_error", "client_closed_request")),
    ],
)
def test_a_name_that_is_not_openais_type_becomes_the_code(status: int, name: str, kind: tuple[str, str]) -> None:
    assert error_kind(status, name) == kind


def test_the_errors_the_gateway_raises_most() -> None:
    assert invalid_request("bad", "x", "invalid_value").detail() == {
        "message": "bad",
        "type": "invalid_request_error",
        "param": "x",
        "code": "invalid_value",
    }
    assert (model_not_found("m", ["a"]).error_type, model_not_found("m", ["a"]).code) == (
        "not_found_error",
        "model_not_found",
    )
    conflict = request_conflict("r", "was used")
    assert (conflict.status_code, conflict.error_type, conflict.code) == (
        409,
        "invalid_request_error",
        "request_id_conflict",
    )


def test_errors_after_the_stream_started_are_openais_too() -> None:
    assert error_payload(BackendUnavailable("down", retry_after_s=1))["error"]["code"] == "backend_unavailable"
    assert error_payload(BackendError("boom"))["error"] == {
        "message": "boom",
        "type": "server_error",
        "param": None,
        "code": "backend_error",
    }
    assert error_payload(ApiError(429, "rate_limit_error", "slow down"))["error"]["code"] == "rate_limit_exceeded"
    assert error_payload(RuntimeError("x"))["error"]["code"] == "internal_error"
