"""POST /v1/generate (streamed or whole) and DELETE /v1/generate/{request_id}."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from gateway.catalog import ServedModel
from gateway.deps import CatalogDep, RegistryDep, SettingsDep
from gateway.errors import (
    error_response,
    invalid_request,
    model_not_found,
    request_conflict,
    request_not_found,
)
from gateway.requests_registry import InflightRequest, RequestIdInUse
from gateway.schemas import CancelResponse, ErrorBody, GenerateBody, GenerateResponse, UsageBody
from gateway.sse import stream_events

router = APIRouter(prefix="/v1/generate", tags=["generate"])

# Tokenizing a prompt this long takes milliseconds: do it off the event loop, so the streams
# this gateway is serving keep their pace.
_TOKENIZE_IN_THREAD_CHARS = 4096

_ERRORS: dict[int | str, dict[str, object]] = {code: {"model": ErrorBody} for code in (400, 404, 409, 502, 503)}


@router.post(
    "",
    response_model=GenerateResponse,
    responses={**_ERRORS, 200: {"content": {"text/event-stream": {}}}},
)
async def generate(
    body: GenerateBody,
    request: Request,
    catalog: CatalogDep,
    registry: RegistryDep,
    settings: SettingsDep,
) -> Response:
    """Generate a completion: SSE deltas then a final event with usage (`stream: true`), or
    one JSON body with the whole reply."""
    model = catalog.get(body.model)
    if model is None:
        raise model_not_found(body.model, catalog.ids())
    request_id = body.request_id or uuid.uuid4().hex
    if registry.get(request_id) is not None:
        raise request_conflict(request_id)
    prompt_tokens = await _count_prompt_tokens(model, body.prompt)
    _check_context(model, prompt_tokens, body.max_tokens)
    try:
        entry = registry.start(body.to_generation_request(request_id), prompt_tokens)
    except RequestIdInUse:
        raise request_conflict(request_id) from None

    headers = {"X-Request-Id": request_id}
    # Before any byte goes out, a failure can still be an honest status code (a 503 when the
    # backend is down), so wait for the first text (streamed) or the end (whole).
    ready = entry.wait_started() if body.stream else entry.wait_done()
    if not await _unless_disconnected(request, ready):
        await registry.cancel(request_id)
        return error_response(499, "client_closed_request", "the client closed the connection", None, headers)
    if entry.error is not None and not entry.deltas:
        raise entry.error
    if body.stream:
        events = stream_events(entry, registry, settings.sse_heartbeat_s)
        sse_headers = {**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(events, media_type="text/event-stream", headers=sse_headers)
    if entry.error is not None:
        raise entry.error
    return JSONResponse(_whole_reply(entry).model_dump(), headers=headers)


@router.delete("/{request_id}", response_model=CancelResponse, responses={404: {"model": ErrorBody}})
async def cancel_generation(request_id: str, registry: RegistryDep) -> CancelResponse:
    """Cancel an in-flight request; its usage so far is in the reply. A request that ended
    meanwhile reports `completed` (or `failed`) instead."""
    entry = await registry.cancel(request_id)
    if entry is None:
        raise request_not_found(request_id)
    status: Literal["cancelled", "completed", "failed"]
    if entry.stop_reason == "cancelled":
        status = "cancelled"
    else:
        status = "failed" if entry.error is not None else "completed"
    return CancelResponse(request_id=request_id, status=status, usage=UsageBody(**entry.usage.as_dict()))


async def _count_prompt_tokens(model: ServedModel, prompt: str) -> int:
    if len(prompt) >= _TOKENIZE_IN_THREAD_CHARS:
        return await asyncio.to_thread(model.count_tokens, prompt)
    return model.count_tokens(prompt)


def _check_context(model: ServedModel, prompt_tokens: int, max_tokens: int) -> None:
    limit = model.max_context_tokens
    if prompt_tokens + max_tokens <= limit:
        return
    message = (
        f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) exceeds model "
        f"{model.model_id!r} context of {limit} tokens"
    )
    if prompt_tokens >= limit:
        raise invalid_request(f"{message}: shorten the prompt", "prompt")
    raise invalid_request(
        f"{message}: lower max_tokens to at most {limit - prompt_tokens} or shorten the prompt",
        "max_tokens",
    )


def _whole_reply(entry: InflightRequest) -> GenerateResponse:
    return GenerateResponse(
        request_id=entry.request_id,
        model=entry.request.model_id,
        text=entry.text,
        stop_reason=entry.stop_reason or "aborted",
        usage=UsageBody(**entry.usage.as_dict()),
    )


async def _unless_disconnected(request: Request, awaitable: Awaitable[None]) -> bool:
    """Await `awaitable` unless the client disconnects first; True if it completed.

    Starlette only watches for disconnects once a streaming body is being sent; before that
    (and for a whole reply) nobody would notice a client that left, and its request would run
    to the end for nothing.
    """
    waiter = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(_until_disconnected(request))
    try:
        await asyncio.wait({waiter, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, watcher):
            task.cancel()
    return waiter.done() and not waiter.cancelled()


async def _until_disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
