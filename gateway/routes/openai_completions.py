"""POST /v1/completions: OpenAI's text completion over `GenerationService`, streamed or whole."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response

from contracts.generation import GenerationDelta, Usage
from contracts.openai_wire.logprobs import (
    CompletionLogprobs,
    TokenLogprob,
    completion_logprobs,
    reply_logprobs,
    token_logprobs,
)
from contracts.openai_wire.schemas import Completion, CompletionChoice, CompletionRequest, CompletionUsage, FinishReason
from contracts.schemas import error_responses
from contracts.service_tier import TIER_OF_CLASS
from contracts.token_text import TextOffsets, TokenTexts
from gateway.auth import PrincipalDep
from gateway.deps import GenerationDep, RegistryDep, SettingsDep
from gateway.key_slots import claim_stream
from gateway.latency_targets import SloHeaders
from gateway.openai_serving import (
    Constraints,
    OpenAIRoute,
    RequestClassHeader,
    RequestIdHeader,
    reply,
    reply_max_tokens,
    sse_data,
    started_generation,
)
from serving.requests_registry import InflightRequest

router = APIRouter(prefix="/v1/completions", tags=["openai"], route_class=OpenAIRoute)

_ERRORS = error_responses(400, 404, 409, 413, 429, 502, 503)


class CompletionChunks:
    """The `text_completion` events of one request, streamed: with echo, a first one with the
    prompt (and its tokens' log-probabilities); then one per delta with text or tokens. Token
    offsets run on from event to event (`whole_logprobs` reads them once, for a whole reply)."""

    def __init__(
        self,
        chunk_id: str,
        created: int,
        model: str,
        entry: InflightRequest,
        *,
        texts: TokenTexts | None,
        echo: str | None,
    ) -> None:
        self.id = chunk_id
        self._created = created
        self._model = model
        self._entry = entry
        self._texts = texts
        self._offsets = None if texts is None else TextOffsets(texts)
        self._echo = echo

    def opening(self) -> list[bytes]:
        if self._echo is None:
            return []
        return [self._event([CompletionChoice(text=self._echo, logprobs=self._prompt(), finish_reason=None)])]

    def delta(self, delta: GenerationDelta) -> list[bytes]:
        logprobs = self._logprobs(token_logprobs(delta.token_ids, delta.logprobs))
        if not delta.text and not (logprobs and logprobs.tokens):
            return []  # a delta without text holds back part of a character
        return [self._event([CompletionChoice(text=delta.text, logprobs=logprobs, finish_reason=None)])]

    def finish(self, reason: FinishReason) -> list[bytes]:
        return [self._event([CompletionChoice(text="", finish_reason=reason)])]

    def usage(self, usage: Usage) -> bytes:
        return self._event([], CompletionUsage.of(usage))

    def whole_logprobs(self) -> CompletionLogprobs | None:
        """A whole reply's: the prompt's first (echo), then the reply's."""
        prompt = self._prompt() if self._echo is not None else None
        reply = self._logprobs(reply_logprobs(self._entry.deltas))
        if prompt is None or reply is None:
            return reply
        return CompletionLogprobs(
            tokens=prompt.tokens + reply.tokens,
            token_logprobs=prompt.token_logprobs + reply.token_logprobs,
            top_logprobs=prompt.top_logprobs + reply.top_logprobs,
            text_offset=prompt.text_offset + reply.text_offset,
        )

    def _prompt(self) -> CompletionLogprobs | None:
        """The prompt's tokens, the first with nulls (nothing comes before it)."""
        if self._texts is None or self._offsets is None:
            return None
        ids = self._entry.request.prompt_token_ids.tolist()
        if not ids:  # replayed from another gateway's record: the prompt's ids stayed there
            return completion_logprobs(self._texts, self._offsets, [])
        tokens = token_logprobs(ids[1:], self._entry.prompt_logprobs)
        return completion_logprobs(self._texts, self._offsets, tokens, first_token_id=ids[0])

    def _logprobs(self, tokens: list[TokenLogprob]) -> CompletionLogprobs | None:
        if self._texts is None or self._offsets is None:
            return None
        return completion_logprobs(self._texts, self._offsets, tokens)

    def _event(self, choices: list[CompletionChoice], usage: CompletionUsage | None = None) -> bytes:
        completion = Completion(
            id=self.id, created=self._created, model=self._model, choices=choices, usage=usage,
            service_tier=TIER_OF_CLASS[self._entry.request_class],
        )  # fmt: skip
        return sse_data(completion)


@router.post("", response_model=Completion, responses={**_ERRORS, 200: {"content": {"text/event-stream": {}}}})
async def create_completion(
    body: CompletionRequest,
    request: Request,
    generation: GenerationDep,
    registry: RegistryDep,
    settings: SettingsDep,
    request_class: RequestClassHeader,
    request_id: RequestIdHeader,
    targets: SloHeaders,
    principal: PrincipalDep,
) -> Response:
    """Complete `prompt`. The class comes from `X-Switchyard-Class`, the id from `X-Request-Id`;
    without max_tokens the reply stops after at most 16 tokens, as OpenAI's (gateway/openai_serving.py:
    `reply_max_tokens`)."""
    created = int(time.time())
    if body.stream:
        claim_stream(request)  # the key's streams at their cap: 429 before anything starts
    model = generation.model(body.model)
    max_tokens = await reply_max_tokens(body, model, body.prompt, principal.team)
    constraints = Constraints(
        guided_grammar=None if body.response_format is None else body.response_format.grammar(),
        logprobs=body.logprobs,
        prompt_logprobs=body.logprobs if body.echo else None,
    )
    entry = await generation.start(
        principal,
        *started_generation(
            body, "completions", body.prompt, max_tokens, request_class, request_id, constraints, targets
        ),
    )
    texts = model.token_texts if body.logprobs is not None else None
    echo = body.prompt if body.echo else None
    chunks = CompletionChunks(f"cmpl-{entry.public_id}", created, body.model, entry, texts=texts, echo=echo)

    def whole(reason: FinishReason) -> Completion:
        choice = CompletionChoice(
            text=(echo or "") + entry.text, logprobs=chunks.whole_logprobs(), finish_reason=reason
        )
        usage = CompletionUsage.of(entry.usage)
        tier = TIER_OF_CLASS[entry.request_class]
        return Completion(
            id=chunks.id, created=created, model=body.model, choices=[choice], usage=usage, service_tier=tier
        )

    heartbeat_s = settings.sse_heartbeat_s
    return await reply(
        request, entry, registry, chunks,
        stream=bool(body.stream), include_usage=body.include_usage, heartbeat_s=heartbeat_s, whole=whole,
    )  # fmt: skip
