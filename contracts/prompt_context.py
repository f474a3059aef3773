"""A prompt's length in the model's tokens, and whether prompt + max_tokens fits the model's
context: the same check at the gateway's edge and for every line of a batch file."""

from __future__ import annotations

import asyncio

from contracts.catalog import ServedModel
from contracts.errors import invalid_request

# Tokenizing a prompt this long takes milliseconds: do it off the event loop, so the streams
# this gateway is serving keep their pace.
_TOKENIZE_IN_THREAD_CHARS = 4096


async def encode_prompt(model: ServedModel, prompt: str) -> list[int]:
    if len(prompt) >= _TOKENIZE_IN_THREAD_CHARS:
        return await asyncio.to_thread(model.encode_prompt, prompt)
    return model.encode_prompt(prompt)


async def count_prompt_tokens(model: ServedModel, prompt: str) -> int:
    return len(await encode_prompt(model, prompt))


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
