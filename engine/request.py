"""The messages that cross the engine's boundary: what a caller submits and what it gets back.

These are the only types a host (the Triton `cpu_engine` model, a benchmark, a test) needs to
drive an engine. They are frozen: once a request is submitted nobody mutates it; the engine
keeps its own mutable state in `Sequence`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RequestClass(enum.Enum):
    """Who is waiting for a request. Interactive work is always scheduled ahead of bulk."""

    INTERACTIVE = "interactive"
    BULK = "bulk"


class FinishReason(enum.Enum):
    """Why a request stopped producing tokens."""

    STOP = "stop"  # an end-of-sequence token, a stop token id or a stop token sequence
    LENGTH = "length"  # max_tokens reached, or the model's context is full
    CANCELLED = "cancelled"  # the caller cancelled it
    ABORTED = "aborted"  # the engine could never serve it (shutdown)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to pick each next token.

    `temperature == 0` is greedy. `top_k == 0` and `top_p == 1.0` disable those filters.
    With `seed` set, the random draw for completion token *i* depends only on (seed, i), so a
    reply resumed elsewhere from its first k tokens draws the same tokens after them.
    """

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    # Token-level stop sequences (TensorRT-LLM's stop_words_list): the reply stops when its
    # tail equals one of them. The matched tokens are emitted; string-level trimming is the
    # postprocessor's job.
    stop_token_sequences: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One generation request as the engine sees it.

    `resume_token_ids` are completion tokens already delivered elsewhere (a server died
    mid-reply): the engine reads them as context and continues after them exactly as if it had
    written them. They count towards `max_tokens` but are not emitted again.
    `cache_namespace` isolates prefix-cache entries (for example per team).
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingParams
    request_class: RequestClass = RequestClass.INTERACTIVE
    resume_token_ids: tuple[int, ...] = ()
    cache_namespace: str = ""


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """What one request gained during one or more engine steps.

    `new_token_ids` is the delta since the previous output of this request. Counters are
    totals so far: `completion_tokens` counts only tokens this engine generated (not resumed
    ones); `cached_tokens` is how many prompt tokens were served from the prefix cache.
    """

    request_id: str
    new_token_ids: tuple[int, ...]
    finished: bool
    finish_reason: FinishReason | None
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
