"""How the dispatcher runs one entry: the same HTTP routes, admission and metering people use.

Each entry goes to its endpoint (`/v1/generate`, `/v1/completions`, `/v1/chat/completions`)
with the admin key acting for the batch's team (`X-Switchyard-Team`), class `bulk`, and a
request id made of the batch, the line, this dispatcher and the attempt. The dispatcher is in
the id because a dispatcher that dies hangs up on its requests, which the gateway then cancels
and records as cancelled: the one that takes the entry over must start it afresh, not be handed
that cut reply as the result.

    200                          DONE: the body is the entry's response
    429 / 503 (admission, fleet) LATER: no room now; not an attempt, retried after Retry-After
    other 4xx                    FAILED: the request itself is wrong; its error is the result
    5xx, broken connection       RETRY: a server failed; the next attempt has a new id
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Any

import httpx

from bulk.batch_lines import BatchEntry
from contracts.schemas import TEAM_HEADER

_DEFAULT_RETRY_AFTER_S = 1.0


class Verdict(enum.Enum):
    DONE = "done"
    FAILED = "failed"
    RETRY = "retry"
    LATER = "later"


@dataclass(frozen=True, slots=True)
class Submission:
    """What became of one attempt. `response` for DONE ({status_code, request_id, body});
    `error` ({code, message}) otherwise; `retry_after_s` for LATER."""

    verdict: Verdict
    request_id: str
    response: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    retry_after_s: float = 0.0


def entry_request_id(batch_id: str, line: int, dispatcher: str, attempt: int) -> str:
    return f"b.{batch_id.removeprefix('batch_')}.{line}.{dispatcher}.{attempt}"


class GatewaySubmitter:
    """Sends entries to a gateway with the admin key; one shared HTTP client."""

    def __init__(self, client: httpx.AsyncClient, admin_key: str) -> None:
        self._client = client
        self._admin_key = admin_key
        self._dispatcher = uuid.uuid4().hex[:8]

    async def submit(self, team_id: str, batch_id: str, entry: BatchEntry, attempt: int) -> Submission:
        request_id = entry_request_id(batch_id, entry.line, self._dispatcher, attempt)
        headers = {
            "Authorization": f"Bearer {self._admin_key}",
            TEAM_HEADER: team_id,
            "X-Switchyard-Class": "bulk",
            "X-Request-Id": request_id,
        }
        body = entry.body
        if entry.endpoint == "/v1/generate":  # the native route takes both in its body
            body = {**body, "class": "bulk", "request_id": request_id}
        try:
            reply = await self._client.post(entry.endpoint, json=body, headers=headers)
        except httpx.HTTPError as exc:
            return Submission(Verdict.RETRY, request_id, error={"code": "server_error", "message": _describe(exc)})
        return _verdict(reply, request_id)


def _verdict(reply: httpx.Response, request_id: str) -> Submission:
    status = reply.status_code
    if status == 200:
        try:
            body = reply.json()
        except ValueError:  # not the gateway's answer (a proxy's page, say): try again
            error = {"code": "invalid_response", "message": f"HTTP 200 without a JSON body: {reply.text[:200]!r}"}
            return Submission(Verdict.RETRY, request_id, error=error)
        return Submission(
            Verdict.DONE, request_id, response={"status_code": 200, "request_id": request_id, "body": body}
        )
    error = _error_of(reply)
    if status in (429, 503):
        retry_after = reply.headers.get("Retry-After")
        delay = float(retry_after) if retry_after and retry_after.replace(".", "", 1).isdigit() else None
        return Submission(Verdict.LATER, request_id, error=error, retry_after_s=delay or _DEFAULT_RETRY_AFTER_S)
    if 400 <= status < 500:
        return Submission(Verdict.FAILED, request_id, error=error)
    return Submission(Verdict.RETRY, request_id, error=error)


def _error_of(reply: httpx.Response) -> dict[str, Any]:
    """The gateway's `{"error": {message, type, param, code}}` (its `code`, the particular
    failure, as the entry's code), or what can be said of another body."""
    try:
        body = reply.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    payload: dict[str, Any] = error if isinstance(error, dict) else {}
    return {
        "code": payload.get("code") or payload.get("type") or f"http_{reply.status_code}",
        "message": payload.get("message") or reply.text[:500] or f"HTTP {reply.status_code}",
        "status_code": reply.status_code,
    }


def _describe(exc: httpx.HTTPError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
