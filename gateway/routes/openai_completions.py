"""POST /v1/completions: OpenAI's text completion over `GenerationService`, streamed or whole."""

from __future__ import annotations

import time
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response

from contracts.generation import Usage
from contracts.openai_schemas import Completion, CompletionChoice, CompletionRequest, CompletionUsage, FinishReason
from contracts.schemas import error_responses
from gateway.auth import PrincipalDep
from gateway.deps import GenerationDep, RegistryDep, SettingsDep
from gateway.key_slots import claim_stream
from gateway.openai_serving import (
    OpenAIRoute,
    RequestClassHeader,
    RequestIdHeader,
    reply,
    reply_max_tokens,
    sse_data,
    started_generation,
)

router = APIRouter(prefix="/v1/completions", tags=["openai"], route_class=OpenAIRoute)

_ERRORS = error_responses(400, 404, 409, 413, 429, 502, 503)


@dataclass(frozen=True, slots=True)
class CompletionChunks:
    """The streamed `text_completion` events of one request."""

    id: str
    created: int
    model: str

    def opening(self) -> list[bytes]:
        return []

    def text(self, text: str) -> bytes:
        return self._event([CompletionChoice(text=text, finish_reason=None)])

    def finish(self, reason: FinishReason) -> bytes:
        return self._event([CompletionChoice(text="", finish_reason=reason)])

    def usage(self, usage: Usage) -> bytes:
        return self._event([], CompletionUsage.of(usage))

    def _event(self, choices: list[CompletionChoice], usage: CompletionUsage | None = None) -> bytes:
        return sse_data(Completion(id=self.id, created=self.created, model=self.model, choices=choices, usage=usage))


@router.post("", response_model=Completion, responses={**_ERRORS, 200: {"content": {"text/event-stream": {}}}})
async def create_completion(
    body: CompletionRequest,
    request: Request,
    generation: GenerationDep,
    registry: RegistryDep,
    settings: SettingsDep,
    request_class: RequestClassHeader,
    request_id: RequestIdHeader,
    principal: PrincipalDep,
) -> Response:
    """Complete `prompt`. The class comes from `X-Switchyard-Class`, the id from `X-Request-Id`;
    without max_tokens the reply stops after at most 16 tokens, as OpenAI's (gateway/openai_serving.py:
    `reply_max_tokens`)."""
    created = int(time.time())
    if body.stream:
        claim_stream(request)  # the key's streams at their cap: 429 before anything starts
    max_tokens = await reply_max_tokens(body, generation.model(body.model), body.prompt, principal.team)
    entry = await generation.start(
        principal, *started_generation(body, "completions", body.prompt, max_tokens, request_class, request_id)
    )
    chunks = CompletionChunks(f"cmpl-{entry.public_id}", created, body.model)

    def whole(reason: FinishReason) -> Completion:
        choice = CompletionChoice(text=entry.text, finish_reason=reason)
        usage = CompletionUsage.of(entry.usage)
        return Completion(id=chunks.id, created=created, model=body.model, choices=[choice], usage=usage)

    heartbeat_s = settings.sse_heartbeat_s
    return await reply(
        request, entry, registry, chunks,
        stream=bool(body.stream), include_usage=body.include_usage, heartbeat_s=heartbeat_s, whole=whole,
    )  # fmt: skip
