"""What the OpenAI-compatible routes share: their headers, answering only once the reply has
started, how a request's end reads in OpenAI's words, and the streamed event loop.

    X-Switchyard-Class: CLASS               the request class: priority, interactive, flex or bulk
                                            (default: `service_tier`, else the team's default_class)
    X-SLO-TTFT-ms, X-SLO-TPOT-ms: MS        latency targets (docs/tiers.md)
    X-Request-Id: ID                        the request id (default: a new one); the reply's `id`
                                            is `chatcmpl-ID` / `cmpl-ID`, DELETE /v1/generate/ID
                                            cancels it

    data: {chunk}          one per delta with text or log-probabilities (chat: a first one with
                           the role; completions with echo: a first one with the prompt)
    data: {chunk}          finish_reason set, empty text
    data: {chunk}          with stream_options.include_usage: usage, no choices
    data: [DONE]

A failure after the first byte ends the stream with `event: error` and the usual error body;
the SDK raises it as an `openai.APIError`.

A request without max_tokens gets its route's default (`default_max_tokens`: completions 16,
chat 2,048), lowered to what the model's context and the team's hard limits leave after the
prompt (`reply_max_tokens`), so leaving it out never turns a request that could run into a 400
or a 413.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import Depends, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError

from config.settings import TeamSpec
from contracts.caller_echo import echoed
from contracts.catalog import ServedModel
from contracts.errors import error_payload, field_path, invalid_request
from contracts.generation import BackendError, GenerationDelta, RequestClass, Usage
from contracts.openai_wire.schemas import OPENAI_TEMPERATURE, ChatCompletionRequest, CompletionRequest, FinishReason
from contracts.prompt_context import count_prompt_tokens
from contracts.schemas import RequestId
from contracts.service_tier import CLASS_OF_TIER, REQUEST_CLASSES
from gateway.disconnects import wait_unless_disconnected
from gateway.error_handlers import error_response
from gateway.latency_targets import LatencyTargets
from gateway.sse import DONE, HEARTBEAT, sse_event
from serving.generation import GenerationInput
from serving.idempotency import fingerprint
from serving.readers import reading
from serving.requests_registry import InflightRequest, RequestRegistry

CLASS_HEADER = "X-Switchyard-Class"
REQUEST_ID_HEADER = "X-Request-Id"

# The engine's `cancelled` (a DELETE, or the client hung up) is a stop the client asked for;
# OpenAI has no word for it, and clients that switch on finish_reason know only these.
_FINISH_REASONS: dict[str, FinishReason] = {"stop": "stop", "length": "length", "cancelled": "stop"}
_REQUEST_ID = TypeAdapter(RequestId)


# What the document says the headers take (checked by hand below, for messages in our words).
_CLASS_HEADER_DOC = Header(json_schema_extra={"enum": list(REQUEST_CLASSES)})
_REQUEST_ID_HEADER_DOC = Header(json_schema_extra={"pattern": "^[A-Za-z0-9._:-]{1,128}$"})


async def request_class_header(
    x_switchyard_class: Annotated[str | None, _CLASS_HEADER_DOC] = None,
) -> RequestClass | None:
    """The header's class; None without one (the team's `default_class` then applies)."""
    if x_switchyard_class is None:
        return None
    for request_class in REQUEST_CLASSES:
        if x_switchyard_class == request_class:
            return request_class
    choices = ", ".join(repr(name) for name in REQUEST_CLASSES)
    raise invalid_request(
        f"header {CLASS_HEADER} must be one of {choices}; got {echoed(x_switchyard_class)}", CLASS_HEADER
    )


async def request_id_header(x_request_id: Annotated[str | None, _REQUEST_ID_HEADER_DOC] = None) -> str | None:
    if x_request_id is None:
        return None
    try:
        return _REQUEST_ID.validate_python(x_request_id)
    except ValidationError:
        raise invalid_request(
            f"header {REQUEST_ID_HEADER} must be 1-128 characters from A-Z, a-z, 0-9 and . _ : -; "
            f"got {echoed(x_request_id)}",
            REQUEST_ID_HEADER,
        ) from None


RequestClassHeader = Annotated[RequestClass | None, Depends(request_class_header)]
RequestIdHeader = Annotated[str | None, Depends(request_id_header)]


class OpenAIRoute(APIRoute):
    """A route whose unknown body fields are refused in OpenAI's terms.

    The app's handler (contracts/errors.py) names /v1/generate's fields as the known ones, which
    would mislead here; OpenAI itself answers "unrecognized request argument"."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                unknown = [_field(e["loc"]) for e in exc.errors() if e.get("type") == "extra_forbidden"]
                if not unknown:
                    raise
                names = ", ".join(repr(name) for name in unknown)
                what = f"field {names}: remove it" if len(unknown) == 1 else f"fields {names}: remove them"
                raise invalid_request(
                    f"unrecognized {what} (docs/openai.md lists the fields this gateway takes)",
                    unknown[0],
                    "unknown_parameter",
                ) from None

        return handle


def _field(loc: tuple[str | int, ...]) -> str:
    return ".".join(field_path(loc))


def finish_reason(entry: InflightRequest) -> FinishReason:
    """How an ended request reads in OpenAI's words; raises its error, or a `BackendError`
    when the engine aborted it (OpenAI has no such reason, and it is no normal end)."""
    if entry.error is not None:
        raise entry.error
    reason = _FINISH_REASONS.get(entry.stop_reason or "")
    if reason is None:
        raise BackendError(f"the server ended the request without finishing it ({entry.stop_reason})")
    return reason


async def wait_until_ready(
    request: Request, entry: InflightRequest, registry: RequestRegistry, stream: bool
) -> Response | None:
    """Hold the answer until the first text (streamed) or the end (whole), so a failure before
    any byte is still an honest status. Raises that failure; returns the response to send
    instead when the client left meanwhile (its request is cancelled), else None."""
    ready = entry.wait_started() if stream else entry.wait_done()
    if not await wait_unless_disconnected(request, entry, registry, ready):
        headers = {REQUEST_ID_HEADER: entry.public_id}
        return error_response(499, "client_closed_request", "the client closed the connection", None, headers)
    if not entry.deltas and entry.done:
        finish_reason(entry)  # raises a failure; a normal end with no text is streamed as usual
    return None


class ChunkWriter(Protocol):
    """The SSE events of one route's stream, already framed."""

    def opening(self) -> list[bytes]: ...

    def delta(self, delta: GenerationDelta) -> list[bytes]: ...

    def finish(self, reason: FinishReason) -> list[bytes]: ...

    def usage(self, usage: Usage) -> bytes: ...


def sse_data(chunk: BaseModel) -> bytes:
    """One `data:` event; pydantic's JSON has no raw newline and keeps non-ASCII as is."""
    return b"data: " + chunk.model_dump_json().encode() + b"\n\n"


def sse_response(events: AsyncIterator[bytes], public_id: str) -> StreamingResponse:
    headers = {REQUEST_ID_HEADER: public_id, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


async def stream_chunks(
    entry: InflightRequest,
    registry: RequestRegistry,
    writer: ChunkWriter,
    include_usage: bool,
    heartbeat_s: float,
) -> AsyncIterator[bytes]:
    """The SSE body of one request; closing it before the request ends (the client went away)
    cancels the request, as on /v1/generate."""
    seen = 0
    with reading(entry, registry):
        # The chunks ready at once go out together, one socket write (as on /v1/generate).
        ready = list(writer.opening())
        while True:
            for delta in entry.deltas[seen:]:
                ready.extend(writer.delta(delta))
            seen = len(entry.deltas)
            if entry.done:
                break
            if ready:
                yield b"".join(ready)
                ready = []
            if not await entry.wait_changed(seen, timeout=heartbeat_s):
                yield HEARTBEAT
        try:
            reason = finish_reason(entry)
        except Exception as exc:  # the stream has started: report in-band
            yield b"".join([*ready, sse_event(error_payload(exc), event="error")])
            return
        ready.extend(writer.finish(reason))
        if include_usage:
            ready.append(writer.usage(entry.usage))
        yield b"".join([*ready, DONE])


async def reply(
    request: Request,
    entry: InflightRequest,
    registry: RequestRegistry,
    writer: ChunkWriter,
    *,
    stream: bool,
    include_usage: bool,
    heartbeat_s: float,
    whole: Callable[[FinishReason], BaseModel],
) -> Response:
    """The answer to an OpenAI-style request once it has started: SSE chunks from `writer`,
    or the whole reply that `whole` builds from the finish reason."""
    closed = await wait_until_ready(request, entry, registry, stream)
    if closed is not None:
        return closed
    if stream:
        return sse_response(stream_chunks(entry, registry, writer, include_usage, heartbeat_s), entry.public_id)
    return JSONResponse(whole(finish_reason(entry)).model_dump(), headers={REQUEST_ID_HEADER: entry.public_id})


async def reply_max_tokens(
    body: CompletionRequest | ChatCompletionRequest, model: ServedModel, prompt: str, team: TeamSpec | None
) -> int:
    """The reply's max_tokens: the caller's, or else the route's default lowered to the room
    `prompt` leaves in the model's context and under the team's hard limits (admission leases
    prompt + max_tokens, and refuses a lease over either limit with a 413).

    At least 1: a prompt that leaves no room is the service's 400 (or admission's 413) about
    the prompt. The prompt is counted only without max_tokens (the service counts it again)."""
    if body.completion_limit is not None:
        return body.completion_limit
    prompt_tokens = await count_prompt_tokens(model, prompt)
    limits = [model.max_context_tokens]
    if team is not None:
        limits += [limit for limit in (team.max_inflight_tokens, team.tokens_per_day) if limit is not None]
    return max(1, min(body.default_max_tokens, *(limit - prompt_tokens for limit in limits)))


@dataclass(frozen=True, slots=True)
class Constraints:
    """What a route asks of the engine beyond sampling: a grammar (and the field it came from,
    for its 400), and log-probabilities of the reply's and the prompt's tokens."""

    guided_grammar: str | None = None
    grammar_param: str = "response_format"
    logprobs: int | None = None
    prompt_logprobs: int | None = None


def started_generation(
    body: CompletionRequest | ChatCompletionRequest,
    route: str,
    prompt: str,
    max_tokens: int,
    request_class: RequestClass | None,
    request_id: str | None,
    constraints: Constraints,
    targets: LatencyTargets,
) -> tuple[GenerationInput, str]:
    """What both OpenAI routes ask `GenerationService.start` for: the generation (prompt and
    max_tokens as the route resolved them) and the body's fingerprint, scoped by `route`. The
    class is `X-Switchyard-Class`'s or `service_tier`'s (`auto`: the team's default)."""
    tier = body.service_tier
    tier_class = None if tier is None or tier == "auto" else CLASS_OF_TIER[tier]
    if request_class is not None and tier_class is not None and request_class != tier_class:
        raise invalid_request(
            f"service_tier {body.service_tier!r} and header {CLASS_HEADER}: {request_class!r} disagree; send one",
            "service_tier",
        )
    inp = GenerationInput(
        model=body.model,
        prompt=prompt,
        max_tokens=max_tokens,
        stop=tuple(body.stop),
        request_class=request_class or tier_class,
        tier_param="service_tier" if request_class is None else CLASS_HEADER,
        slo_ttft_ms=targets.ttft_ms,
        slo_tpot_ms=targets.tpot_ms,
        request_id=request_id,
        temperature=OPENAI_TEMPERATURE if body.temperature is None else body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        ignore_eos=bool(body.ignore_eos),
        stream=bool(body.stream),
        guided_grammar=constraints.guided_grammar,
        grammar_param=constraints.grammar_param,
        logprobs=constraints.logprobs,
        prompt_logprobs=constraints.prompt_logprobs,
    )
    digest = fingerprint({"route": route, **body.model_dump(mode="json", exclude={"stream", "stream_options"})})
    return inp, digest
