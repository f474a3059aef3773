"""POST /v1/generate (streamed or whole) and DELETE /v1/generate/{request_id}."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from contracts.errors import request_not_found
from contracts.schemas import CancelResponse, ErrorBody, GenerateBody, GenerateResponse, UsageBody, error_responses
from gateway.auth import PrincipalDep
from gateway.deps import GenerationDep, RegistryDep, SettingsDep
from gateway.disconnects import wait_unless_disconnected
from gateway.error_handlers import error_response
from gateway.key_slots import claim_stream
from gateway.latency_targets import SloHeaders
from gateway.sse import stream_events
from serving.generation import body_digest, generation_input
from serving.requests_registry import InflightRequest

router = APIRouter(prefix="/v1/generate", tags=["generate"])

_ERRORS = error_responses(400, 404, 409, 413, 429, 502, 503)


@router.post(
    "",
    response_model=GenerateResponse,
    responses={**_ERRORS, 200: {"content": {"text/event-stream": {}}}},
)
async def generate(
    body: GenerateBody,
    request: Request,
    generation: GenerationDep,
    registry: RegistryDep,
    settings: SettingsDep,
    targets: SloHeaders,
    principal: PrincipalDep,
) -> Response:
    """Generate a completion: SSE deltas then a final event with usage (`stream: true`), or
    one JSON body with the whole reply. A repeated `request_id` with the same body returns
    the same generation (attached while it runs, stored after); with another body, 409.
    Latency targets come from the body's `slo_ttft_ms` / `slo_tpot_ms` or, without them, the
    headers `x-slo-ttft-ms` / `x-slo-tpot-ms`."""
    if body.stream:
        claim_stream(request)  # the key's streams at their cap: 429 before anything starts
    inp = generation_input(body)
    inp = replace(
        inp,
        slo_ttft_ms=inp.slo_ttft_ms if inp.slo_ttft_ms is not None else targets.ttft_ms,
        slo_tpot_ms=inp.slo_tpot_ms if inp.slo_tpot_ms is not None else targets.tpot_ms,
    )
    entry = await generation.start(principal, inp, body_digest(body))
    headers = {"X-Request-Id": entry.public_id}
    # Before any byte goes out, a failure can still be an honest status code (a 503 when the
    # backend is down), so wait for the first text (streamed) or the end (whole).
    ready = entry.wait_started() if body.stream else entry.wait_done()
    if not await wait_unless_disconnected(request, entry, registry, ready):
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
async def cancel_generation(request_id: str, generation: GenerationDep, principal: PrincipalDep) -> CancelResponse:
    """Cancel one of the team's requests, on whichever gateway process runs it; its usage so
    far is in the reply. A request that ended meanwhile reports `completed` (or `failed`)."""
    entry = await generation.cancel(principal, request_id)
    if entry is None:
        raise request_not_found(request_id)
    status: Literal["cancelled", "completed", "failed"]
    if entry.stop_reason == "cancelled":
        status = "cancelled"
    else:
        status = "failed" if entry.error is not None else "completed"
    return CancelResponse(request_id=request_id, status=status, usage=UsageBody(**entry.usage.as_dict()))


def _whole_reply(entry: InflightRequest) -> GenerateResponse:
    return GenerateResponse(
        request_id=entry.public_id,
        model=entry.request.model_id,
        text=entry.text,
        stop_reason=entry.stop_reason or "aborted",
        usage=UsageBody(**entry.usage.as_dict()),
    )
