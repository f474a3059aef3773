"""Order at the edge: key, then size, then content, before a byte of the body is read.

An ASGI middleware around the whole app, so nothing below it (FastAPI's body parsing, a
route's multipart reader) ever sees a request the edge refuses:

    /v1/...  no key, a malformed or unknown one ── 401   (the body unread, however malformed)
             Redis cannot say                    ── 503 Retry-After
    any      Content-Length over the limit       ── 413   (unread; the connection is closed)
    /v1/...  the key's requests at its cap       ── 429 Retry-After (gateway/key_slots.py)
    any      body read: more bytes than the limit (chunked) ── 413, reading stops there
                        slower than allowed                  ── 408
             (the app is told the body failed; the edge answers in its place)

The limit is `gateway.max_body_bytes` for JSON, and `bulk.max_file_bytes` plus 1 MiB of form
for the two multipart uploads (`POST /v1/files`, a native `POST /v1/batches`). A body must
begin within `body_timeout_s`, never pause longer, and then keep up `min_body_bytes_per_s`.
The console (/console) asks for no key here: it checks its own session cookie (gateway/console/).
Health, readiness, metrics and the API docs stay public; once the body is in, the app reads
the connection (a client hanging up) unhindered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import redis
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from config.settings import SwitchyardConfig
from contracts.errors import ApiError
from gateway.auth import bearer_key, keys_unavailable, unknown_key
from gateway.edge_keys import EdgeCaller, KeyCache
from gateway.key_slots import SLOT_SCOPE_KEY, KeySlot, KeySlots, too_many
from gateway.settings import GatewaySettings
from quota.stream_shares import StreamShares

logger = logging.getLogger(__name__)

EDGE_STATE = "edge"  # app.state.edge: the Edge the lifespan built
UPLOAD_FORM_BYTES = 1024 * 1024  # a multipart upload's fields and framing beside its file
UPLOAD_PATHS = frozenset({"/v1/files", "/v1/batches", "/console/batches"})  # the console's upload too


@dataclass(frozen=True, slots=True)
class BodyLimits:
    max_body_bytes: int
    max_upload_bytes: int
    timeout_s: float
    min_bytes_per_s: int

    def for_request(self, path: str, content_type: str) -> int:
        if path in UPLOAD_PATHS and content_type.startswith("multipart/"):
            return self.max_upload_bytes
        return self.max_body_bytes


@dataclass(frozen=True, slots=True)
class Edge:
    """What the guard checks against, built in the app's lifespan (`install_edge`)."""

    limits: BodyLimits
    keys: KeyCache
    slots: KeySlots


def install_edge(app: FastAPI, config: SwitchyardConfig, settings: GatewaySettings, keys: KeyCache) -> Edge:
    """Build the edge's limits and per-key slots (with the worker's stream shares) for this
    process, over the worker's one key cache (the lifespan)."""
    gateway = config.gateway
    limits = BodyLimits(
        gateway.max_body_bytes,
        config.bulk.max_file_bytes + UPLOAD_FORM_BYTES,
        gateway.body_timeout_s,
        gateway.min_body_bytes_per_s,
    )
    streams = StreamShares(
        gateway.max_streams_per_worker,
        {team_id: team.weight for team_id, team in config.teams.items()},
        gateway.stream_reserve_fraction,
    )
    slots = KeySlots.per_worker(
        gateway.max_requests_per_key, gateway.max_streams_per_key, settings.workers, settings.retry_after_s, streams
    )
    edge = Edge(limits, keys, slots)
    setattr(app.state, EDGE_STATE, edge)
    return edge


class BodyRefused(Exception):
    """The body broke a limit while the app read it; the edge answers `error` instead."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(error.message)
        self.error = error


def too_large(limit: int, what: str) -> ApiError:
    return ApiError(
        413,
        "invalid_request_error",
        f"request body {what} the limit of {limit} bytes",
        None,
        {"Connection": "close"},
        code="request_too_large",
    )


def too_slow(message: str) -> ApiError:
    return ApiError(408, "invalid_request_error", message, None, {"Connection": "close"}, code="request_timeout")


class BodyMeter:
    """The request's `receive`, counting body bytes against the limit and the clock."""

    def __init__(self, receive: Receive, limit: int, limits: BodyLimits) -> None:
        self._receive = receive
        self._limit = limit
        self._limits = limits
        self.started = self.last_chunk_at = time.monotonic()
        self.received = 0
        self.complete = False
        self.refusal: ApiError | None = None

    async def __call__(self) -> Message:
        if self.complete:  # the body is in: what follows is the app listening for a hang-up
            return await self._receive()
        if self.refusal is not None:
            raise BodyRefused(self.refusal)
        wait_s = self._wait_s()
        try:
            message = await asyncio.wait_for(self._receive(), timeout=max(wait_s, 0.0))
        except TimeoutError:
            self.refusal = too_slow(
                f"the request body stopped arriving ({self.received} bytes in {time.monotonic() - self.started:.1f} s; "
                f"send it within {self._limits.timeout_s:g} s, at {self._limits.min_bytes_per_s} bytes/s or faster)"
            )
            raise BodyRefused(self.refusal) from None
        if message["type"] != "http.request":
            return message
        self.received += len(message.get("body", b""))
        self.last_chunk_at = time.monotonic()
        if self.received > self._limit:
            self.refusal = too_large(self._limit, "is over")
            raise BodyRefused(self.refusal)
        self.complete = not message.get("more_body", False)
        return message

    def _wait_s(self) -> float:
        """Until the next chunk is due: no pause over `timeout_s`, and on average the minimum
        rate after the first `timeout_s`."""
        limits = self._limits
        paced = self.started + limits.timeout_s + self.received / limits.min_bytes_per_s
        return min(self.last_chunk_at + limits.timeout_s, paced) - time.monotonic()


class EdgeGuard:
    """The ASGI middleware (installed by `create_app`); until the lifespan has built the
    app's `Edge` it lets everything through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        edge = getattr(scope["app"].state, EDGE_STATE, None) if "app" in scope else None
        if scope["type"] != "http" or not isinstance(edge, Edge):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        path: str = scope["path"]
        caller: EdgeCaller | None = None
        if path == "/v1" or path.startswith("/v1/"):
            try:
                caller = await self._caller(edge, headers.get("authorization"))
            except ApiError as refused:
                await _answer(scope, receive, send, refused)
                return
        limit = edge.limits.for_request(path, headers.get("content-type", ""))
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            what = "declares more than" if declared.isdigit() else "has an unreadable length: within"
            await _answer(scope, receive, send, too_large(limit, what))
            return
        slot: KeySlot | None = None
        if caller is not None and caller.team_id is not None:
            slot = edge.slots.acquire(caller.key_id, caller.team_id)
            if slot is None:
                slots = edge.slots
                await _answer(scope, receive, send, too_many("requests", slots.max_requests, slots.retry_after_s))
                return
            scope[SLOT_SCOPE_KEY] = slot
        try:
            await self._serve(scope, BodyMeter(receive, limit, edge.limits), send)
        finally:
            if slot is not None:
                slot.release()

    async def _caller(self, edge: Edge, header: str | None) -> EdgeCaller:
        key = bearer_key(header)  # the route's own parser: the same 401 for the same header
        try:
            caller = await edge.keys.caller(key)
        except redis.RedisError:
            raise keys_unavailable() from None
        if caller is None:
            raise unknown_key()
        return caller

    async def _serve(self, scope: Scope, meter: BodyMeter, send: Send) -> None:
        """Run the app; once the body broke a limit, its answer is replaced by the edge's."""
        started = False
        replaced = False

        async def guarded_send(message: Message) -> None:
            nonlocal started, replaced
            if replaced:
                return
            if message["type"] == "http.response.start" and meter.refusal is not None:
                replaced = True
                await _answer(scope, meter, send, meter.refusal)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, meter, guarded_send)
        except Exception:
            if meter.refusal is None or started:
                raise
            if not replaced:
                await _answer(scope, meter, send, meter.refusal)


def _headers(scope: Scope) -> dict[str, str]:
    """The headers the edge reads (the last of a repeated one), decoded as latin-1."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}


async def _answer(scope: Scope, receive: Receive, send: Send, error: ApiError) -> None:
    metrics = getattr(scope["app"].state, "metrics", None)
    if metrics is not None:
        metrics.errors.labels(status=str(error.status_code), type=error.error_type).inc()
    response = JSONResponse({"error": error.detail()}, status_code=error.status_code, headers=error.headers)
    await response(scope, receive, send)
