"""GatewaySubmitter against a scripted gateway (httpx.MockTransport): the request it sends, and
the verdict each reply becomes."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from bulk.batch_lines import BatchEntry
from bulk.gateway_client import GatewaySubmitter, Submission, Verdict, entry_request_id

ADMIN_KEY = "sy-admin-key-for-tests"
BATCH = "batch_abc123"
GENERATE = BatchEntry(7, "q7", "/v1/generate", {"model": "small", "prompt": "hi", "max_tokens": 5}, 9)
CHAT = BatchEntry(
    8,
    "q8",
    "/v1/chat/completions",
    {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
    75,
)
Handler = Callable[[httpx.Request], httpx.Response]


class Gateway:
    """Answers every request with `handler` and keeps the requests it got."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.handler: Handler = lambda request: httpx.Response(200, json={"text": "ok"})

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.handler(request)


@pytest.fixture
def gateway() -> Gateway:
    return Gateway()


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(gateway), base_url="http://gateway") as client:
        yield client


@pytest.fixture
def submitter(http: httpx.AsyncClient) -> GatewaySubmitter:
    return GatewaySubmitter(http, ADMIN_KEY)


def _error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"error": {"type": error_type, "message": message, "param": None}}


def test_entry_request_id_names_batch_line_dispatcher_and_attempt() -> None:
    assert entry_request_id("batch_abc", 12, "d0d0d0d0", 3) == "b.abc.12.d0d0d0d0.3"


async def test_generate_request_carries_key_team_class_and_id(gateway: Gateway, submitter: GatewaySubmitter) -> None:
    submission = await submitter.submit("alpha", BATCH, GENERATE, attempt=2)
    assert re.fullmatch(r"b\.abc123\.7\.[0-9a-f]{8}\.2", submission.request_id)
    (request,) = gateway.requests
    assert (request.method, request.url.path) == ("POST", "/v1/generate")
    assert request.headers["Authorization"] == f"Bearer {ADMIN_KEY}"
    assert request.headers["X-Switchyard-Team"] == "alpha"
    assert request.headers["X-Switchyard-Class"] == "bulk"
    assert request.headers["X-Request-Id"] == submission.request_id
    assert json.loads(request.content) == {
        "model": "small",
        "prompt": "hi",
        "max_tokens": 5,
        "class": "bulk",
        "request_id": submission.request_id,
    }
    assert GENERATE.body == {"model": "small", "prompt": "hi", "max_tokens": 5}  # the entry is left as it was


async def test_openai_request_body_is_the_entry_body(gateway: Gateway, submitter: GatewaySubmitter) -> None:
    submission = await submitter.submit("beta", BATCH, CHAT, attempt=0)
    (request,) = gateway.requests
    assert request.url.path == "/v1/chat/completions"
    assert json.loads(request.content) == CHAT.body  # class and id travel only in headers here
    assert (request.headers["X-Switchyard-Team"], request.headers["X-Switchyard-Class"]) == ("beta", "bulk")
    assert request.headers["X-Request-Id"] == submission.request_id


async def test_request_ids_differ_between_attempts_and_submitters(
    gateway: Gateway, submitter: GatewaySubmitter, http: httpx.AsyncClient
) -> None:
    other = GatewaySubmitter(http, ADMIN_KEY)
    ids = [
        (await submitter.submit("alpha", BATCH, GENERATE, attempt=0)).request_id,
        (await submitter.submit("alpha", BATCH, GENERATE, attempt=1)).request_id,
        (await other.submit("alpha", BATCH, GENERATE, attempt=0)).request_id,
    ]
    assert len(set(ids)) == 3
    assert [r.headers["X-Request-Id"] for r in gateway.requests] == ids
    # Same submitter, same attempt: the same id (a resend is the same request).
    assert (await submitter.submit("alpha", BATCH, GENERATE, attempt=0)).request_id == ids[0]


async def test_200_is_done_with_the_body_as_response(gateway: Gateway, submitter: GatewaySubmitter) -> None:
    body = {"text": "Hello, world", "usage": {"prompt_tokens": 2, "completion_tokens": 3}}
    gateway.handler = lambda request: httpx.Response(200, json=body)
    submission = await submitter.submit("alpha", BATCH, GENERATE, attempt=0)
    assert submission == Submission(
        Verdict.DONE,
        submission.request_id,
        response={"status_code": 200, "request_id": submission.request_id, "body": body},
    )


@pytest.mark.parametrize(
    ("status", "headers", "retry_after_s"),
    [
        (429, {"Retry-After": "3"}, 3.0),
        (503, {"Retry-After": "2.5"}, 2.5),
        (429, {}, 1.0),
        (503, {}, 1.0),
        (429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 1.0),  # not seconds: the default
    ],
)
async def test_no_room_is_later_with_retry_after(
    gateway: Gateway, submitter: GatewaySubmitter, status: int, headers: dict[str, str], retry_after_s: float
) -> None:
    gateway.handler = lambda request: httpx.Response(
        status, json=_error_body("rate_limit_error", "no room for bulk now"), headers=headers
    )
    submission = await submitter.submit("alpha", BATCH, GENERATE, attempt=0)
    assert submission == Submission(
        Verdict.LATER,
        submission.request_id,
        error={"code": "rate_limit_error", "message": "no room for bulk now", "status_code": status},
        retry_after_s=retry_after_s,
    )


@pytest.mark.parametrize(
    ("status", "error_type", "message"),
    [
        (400, "invalid_request_error", "max_tokens: must be at most 4096"),
        (404, "model_not_found", "model 'gone' is not served here"),
        (413, "request_too_large", "the request never fits this team's share"),
    ],
)
async def test_client_errors_fail_with_the_gateways_error(
    gateway: Gateway, submitter: GatewaySubmitter, status: int, error_type: str, message: str
) -> None:
    gateway.handler = lambda request: httpx.Response(status, json=_error_body(error_type, message))
    submission = await submitter.submit("alpha", BATCH, GENERATE, attempt=0)
    assert submission == Submission(
        Verdict.FAILED, submission.request_id, error={"code": error_type, "message": message, "status_code": status}
    )


async def test_a_failed_entry_carries_the_gateways_error_code(gateway: Gateway, submitter: GatewaySubmitter) -> None:
    error = {
        "message": "model 'gone' is not served",
        "type": "not_found_error",
        "param": "model",
        "code": "model_not_found",
    }
    gateway.handler = lambda request: httpx.Response(404, json={"error": error})
    submission = await submitter.submit("alpha", BATCH, GENERATE, attempt=0)
    assert submission.error == {"code": "model_not_found", "message": error["message"], "status_code": 404}


@pytest.mark.parametrize(
    ("status", "error_type", "message"),
    [(500, "internal_error", "the gateway failed; see its log"), (502, "backend_error", "engine failed")],
)
async def test_server_errors_are_retried(
    gateway: Gateway, submitter: GatewaySubmitter, status: int, error_type: str, message: str
) -> None:
    gateway.handler = lambda request: httpx.Response(status, json=_error_body(error_type, message))
    submission = await submitter.submit("alpha", BATCH, GENERATE, attempt=1)
    assert submission == Submission(
        Verdict.RETRY, submission.request_id, error={"code": error_type, "message": message, "status_code": status}
    )


async def test_server_error_without_json_names_the_status(gateway: Gateway, submitter: GatewaySubmitter) -> None:
    gateway.handler = lambda request: httpx.Response(502, text="<html>Bad Gateway</html>")
    submission = await submitter.submit("alpha", BATCH, GENERATE, attempt=0)
    assert submission.verdict is Verdict.RETRY
    assert submission.error == {"code": "http_502", "message": "<html>Bad Gateway</html>", "status_code": 502}


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (httpx.ConnectError("connection refused"), "ConnectError: connection refused"),
        (httpx.ReadTimeout(""), "ReadTimeout"),
        (httpx.RemoteProtocolError("peer closed connection"), "RemoteProtocolError: peer closed connection"),
    ],
)
async def test_transport_error_is_retried(
    gateway: Gateway, submitter: GatewaySubmitter, exc: httpx.HTTPError, message: str
) -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise exc

    gateway.handler = broken
    submission = await submitter.submit("alpha", BATCH, GENERATE, attempt=0)
    assert submission == Submission(
        Verdict.RETRY, submission.request_id, error={"code": "server_error", "message": message}
    )


async def test_error_body_with_a_string_error_still_fails_the_entry(
    gateway: Gateway, submitter: GatewaySubmitter
) -> None:
    gateway.handler = lambda request: httpx.Response(400, json={"error": "bad request"})
    submission = await submitter.submit("alpha", BATCH, GENERATE, attempt=0)
    assert submission.verdict is Verdict.FAILED
    assert submission.error == {"code": "http_400", "message": '{"error":"bad request"}', "status_code": 400}


async def test_200_without_json_body_is_retried(gateway: Gateway, submitter: GatewaySubmitter) -> None:
    gateway.handler = lambda request: httpx.Response(200, text="<html>maintenance</html>")
    submission = await submitter.submit("alpha", BATCH, GENERATE, attempt=0)
    assert submission.verdict is Verdict.RETRY
