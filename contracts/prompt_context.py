"""A prompt's length in the model's tokens, and whether prompt + max_tokens fits the model's
context: the same check at the gateway's edge and for every line of a batch file.

In that order, so a prompt costs at most what could still fit:

    check_prompt_bytes   UTF-8 bytes > max_context_tokens x longest_token_bytes: 400 untokenized
    encode_prompt        short prompts inline; long ones on the catalog's tokenizer threads,
                         with the GIL released (contracts/catalog.py), the event loop free
    check_context        prompt tokens + max_tokens > max_context_tokens: 400

The size rule assumes every byte of the prompt ends up in some token, as a byte-level BPE
(or byte fallback) makes sure; a tokenizer that drops text (a normalizer stripping accents,
a whitespace pre-tokenizer) could fit a longer prompt, which is refused all the same.
"""

from __future__ import annotations

import asyncio

from contracts.catalog import ServedModel
from contracts.errors import invalid_request

# Tokenizing a prompt this long takes milliseconds: do it off the event loop, so the streams
# this gateway is serving keep their pace.
_TOKENIZE_IN_THREAD_CHARS = 4096
# A character is at most this many UTF-8 bytes: a prompt of few enough characters is in size.
_MAX_UTF8_BYTES_PER_CHAR = 4


def check_prompt_bytes(model: ServedModel, prompt: str, param: str = "prompt") -> None:
    """400 when `prompt` is longer in bytes than any prompt that fits the context can be, so it
    is never tokenized (see the module docstring)."""
    limit = model.max_prompt_bytes
    if len(prompt) * _MAX_UTF8_BYTES_PER_CHAR <= limit:
        return
    size = len(prompt.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return
    raise invalid_request(
        f"prompt is {size} bytes, more than model {model.model_id!r}'s context of {model.max_context_tokens} "
        f"tokens can hold (at most {model.longest_token_bytes} bytes a token, {limit} in all): shorten the prompt",
        param,
        "context_length_exceeded",
    )


async def encode_prompt(model: ServedModel, prompt: str) -> list[int]:
    """The prompt's token ids, once its size says it may fit; long prompts are tokenized on the
    model's executor, with the event loop free meanwhile."""
    check_prompt_bytes(model, prompt)
    if len(prompt) >= _TOKENIZE_IN_THREAD_CHARS:
        return await asyncio.get_running_loop().run_in_executor(model.executor, model.encode_prompt, prompt)
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
        raise invalid_request(f"{message}: shorten the prompt", "prompt", "context_length_exceeded")
    raise invalid_request(
        f"{message}: lower max_tokens to at most {limit - prompt_tokens} or shorten the prompt",
        "max_tokens",
        "context_length_exceeded",
    )
