"""Log-probabilities in OpenAI's two shapes, from what the model servers send
(`GenerationDelta.logprobs`: per token its log-probability and k alternatives).

    chat         choices[].logprobs = {"content": [{token, logprob, bytes, top_logprobs: [
                     {token, logprob, bytes}, ...k]}, ...one per token], "refusal": null}
    completions  choices[].logprobs = {"tokens": [...], "token_logprobs": [...],
                     "top_logprobs": [{token: logprob, ...k and the chosen one}, ...],
                     "text_offset": [...]}
                 with echo: the prompt's tokens first, the first one's log-probability and
                 alternatives null (nothing comes before it), then the reply's

Token text and bytes come from the model's tokenizer (contracts/token_text.py). Which
distribution the numbers are of: engine/logprobs.py, docs/openai.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from contracts.generation import GenerationDelta, Logprobs
from contracts.token_text import TextOffsets, TokenTexts


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token's log-probability and its alternatives, most likely first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def token_logprobs(token_ids: Sequence[int], logprobs: Logprobs | None) -> list[TokenLogprob]:
    """Per token of a run (a delta's, the prompt's); none when the run came without them (a
    reply replayed from another gateway's record)."""
    if logprobs is None:
        return []
    return [
        TokenLogprob(token_id, value, tuple(logprobs.top(i)))
        for i, (token_id, value) in enumerate(zip(token_ids, logprobs.token_logprobs, strict=False))
    ]


def reply_logprobs(deltas: Iterable[GenerationDelta]) -> list[TokenLogprob]:
    """Every token's of a whole reply, in order."""
    return [entry for delta in deltas for entry in token_logprobs(delta.token_ids, delta.logprobs)]


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class ChatTokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob] | None
    refusal: None = None


def chat_logprobs(texts: TokenTexts, tokens: Sequence[TokenLogprob]) -> ChatLogprobs:
    """Chat's shape for a run of tokens."""

    def top(token_id: int, logprob: float) -> TopLogprob:
        return TopLogprob(token=texts.token(token_id), logprob=logprob, bytes=list(texts.token_bytes(token_id)))

    content = [
        ChatTokenLogprob(
            **top(entry.token_id, entry.logprob).model_dump(), top_logprobs=[top(i, v) for i, v in entry.top]
        )
        for entry in tokens
    ]
    return ChatLogprobs(content=content)


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


def completion_logprobs(
    texts: TokenTexts, offsets: TextOffsets, tokens: Sequence[TokenLogprob], *, first_token_id: int | None = None
) -> CompletionLogprobs:
    """Completions' shape for a run of tokens, offsets continuing from `offsets`. With
    `first_token_id` (echo's first prompt token) the run opens with that token and nulls."""
    ids = ([] if first_token_id is None else [first_token_id]) + [entry.token_id for entry in tokens]
    lead: list[None] = [] if first_token_id is None else [None]
    return CompletionLogprobs(
        tokens=[texts.token(token_id) for token_id in ids],
        token_logprobs=[*lead, *(entry.logprob for entry in tokens)],
        top_logprobs=[*lead, *(_top_dict(texts, entry) for entry in tokens)],
        text_offset=offsets.take(ids),
    )


def _top_dict(texts: TokenTexts, entry: TokenLogprob) -> dict[str, float]:
    """The alternatives as OpenAI's completions give them: token text -> log-probability, the
    chosen token always among them (so up to k + 1)."""
    top = {texts.token(token_id): value for token_id, value in entry.top}
    top.setdefault(texts.token(entry.token_id), entry.logprob)
    return top
