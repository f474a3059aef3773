"""Accepting one generation, whichever API it came through (`/v1/generate`, the OpenAI-style
routes): look the model up, check the context, and start it in the registry.

    route ──GenerationInput──▶ GenerationService.start() ──▶ InflightRequest (read by the route)
                                 model known? context fits?    the registry's pump task
                                 id free?                      streams the backend's deltas

Routes only translate their own request and response shapes; every rule about what may run
lives here, so the surfaces cannot drift apart.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from gateway.backend import GenerationRequest, RequestClass
from gateway.catalog import ModelCatalog, ServedModel
from gateway.errors import invalid_request, model_not_found, request_conflict
from gateway.requests_registry import InflightRequest, RequestIdInUse, RequestRegistry

# Tokenizing a prompt this long takes milliseconds: do it off the event loop, so the streams
# this gateway is serving keep their pace.
_TOKENIZE_IN_THREAD_CHARS = 4096


@dataclass(frozen=True, slots=True)
class GenerationInput:
    """What a caller asked for, already validated for types and ranges at the HTTP edge."""

    model: str
    prompt: str
    max_tokens: int
    stop: tuple[str, ...] = ()
    request_class: RequestClass = "interactive"
    request_id: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    ignore_eos: bool = False


class GenerationService:
    """Starts generations; raises the API's errors (404 model, 400 context, 409 id)."""

    def __init__(self, catalog: ModelCatalog, registry: RequestRegistry) -> None:
        self._catalog = catalog
        self._registry = registry

    def model(self, model_id: str) -> ServedModel:
        model = self._catalog.get(model_id)
        if model is None:
            raise model_not_found(model_id, self._catalog.ids())
        return model

    async def start(self, inp: GenerationInput) -> InflightRequest:
        model = self.model(inp.model)
        request_id = inp.request_id or uuid.uuid4().hex
        if self._registry.get(request_id) is not None:
            raise request_conflict(request_id)
        prompt_tokens = await count_prompt_tokens(model, inp.prompt)
        check_context(model, prompt_tokens, inp.max_tokens)
        request = GenerationRequest(
            request_id=request_id,
            model_id=inp.model,
            prompt=inp.prompt,
            max_tokens=inp.max_tokens,
            stop=inp.stop,
            request_class=inp.request_class,
            temperature=inp.temperature,
            top_p=inp.top_p,
            top_k=inp.top_k,
            seed=inp.seed,
            ignore_eos=inp.ignore_eos,
        )
        try:
            return self._registry.start(request, prompt_tokens)
        except RequestIdInUse:
            raise request_conflict(request_id) from None


async def count_prompt_tokens(model: ServedModel, prompt: str) -> int:
    if len(prompt) >= _TOKENIZE_IN_THREAD_CHARS:
        return await asyncio.to_thread(model.count_tokens, prompt)
    return model.count_tokens(prompt)


def check_context(model: ServedModel, prompt_tokens: int, max_tokens: int) -> None:
    """400 when prompt + max_tokens cannot fit the model's context, saying what to change."""
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
