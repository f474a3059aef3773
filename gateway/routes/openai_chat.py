"""POST /v1/chat/completions: messages rendered with the model's chat template, then generated
like any prompt through `GenerationService`, streamed or whole."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from contracts.errors import invalid_request
from contracts.openai_wire.chat_template import ChatTemplates
from contracts.openai_wire.schemas import ChatCompletion, ChatCompletionRequest, FinishReason
from contracts.schemas import error_responses
from gateway.auth import PrincipalDep
from gateway.chat_reply import ChatChunks, chat_constraints, whole_chat
from gateway.deps import GenerationDep, RegistryDep, SettingsDep, services_of
from gateway.key_slots import claim_stream
from gateway.latency_targets import SloHeaders
from gateway.openai_serving import (
    OpenAIRoute,
    RequestClassHeader,
    RequestIdHeader,
    reply,
    reply_max_tokens,
    started_generation,
)

router = APIRouter(prefix="/v1/chat/completions", tags=["openai"], route_class=OpenAIRoute)

_ERRORS = error_responses(400, 404, 409, 413, 429, 502, 503)


async def get_chat_templates(request: Request) -> ChatTemplates:
    """The app's chat templates, made on first use for the config the lifespan loaded (and
    remade if a new lifespan loaded another), so each template is compiled once."""
    config = services_of(request).config
    templates = getattr(request.app.state, "chat_templates", None)
    if not isinstance(templates, ChatTemplates) or templates.config is not config:
        templates = ChatTemplates(config)
        request.app.state.chat_templates = templates
    return templates


ChatTemplatesDep = Annotated[ChatTemplates, Depends(get_chat_templates)]


@router.post("", response_model=ChatCompletion, responses={**_ERRORS, 200: {"content": {"text/event-stream": {}}}})
async def create_chat_completion(
    body: ChatCompletionRequest,
    request: Request,
    generation: GenerationDep,
    registry: RegistryDep,
    settings: SettingsDep,
    templates: ChatTemplatesDep,
    request_class: RequestClassHeader,
    request_id: RequestIdHeader,
    targets: SloHeaders,
    principal: PrincipalDep,
) -> Response:
    """Reply to `messages`. Without max_tokens the reply may use the rest of the context, up to
    2,048 tokens (gateway/openai_serving.py: `reply_max_tokens`)."""
    created = int(time.time())
    if body.stream:
        claim_stream(request)  # the key's streams at their cap: 429 before anything starts
    model = generation.model(body.model)
    constraints = chat_constraints(body)
    prompt = templates.render(model, body.template_messages(), body.shown_tools)
    if not prompt:
        raise invalid_request(f"model {body.model!r}'s chat template rendered these messages as nothing", "messages")
    max_tokens = await reply_max_tokens(body, model, prompt, principal.team)
    entry = await generation.start(
        principal,
        *started_generation(body, "chat", prompt, max_tokens, request_class, request_id, constraints, targets),
    )
    texts = model.token_texts if constraints.logprobs is not None else None
    calls = constraints.grammar_param == "tools" and constraints.guided_grammar is not None
    chunks = ChatChunks(f"chatcmpl-{entry.public_id}", created, body.model, entry, texts=texts, calls=calls)

    def whole(reason: FinishReason) -> ChatCompletion:
        return whole_chat(entry, chunks.id, created, body.model, reason, texts=texts, calls=calls)

    heartbeat_s = settings.sse_heartbeat_s
    return await reply(
        request, entry, registry, chunks,
        stream=bool(body.stream), include_usage=body.include_usage, heartbeat_s=heartbeat_s, whole=whole,
    )  # fmt: skip
