"""The messages that cross the engine's boundary: what a caller submits and what it gets back.

These are the only types a host (the Triton `cpu_engine` model, a benchmark, a test) needs to
drive an engine. They are frozen: once a request is submitted nobody mutates it; the engine
keeps its own mutable state in `Sequence`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RequestClass(enum.Enum):
    """Who is waiting for a request, highest class first: the order a step serves them in.

        priority      ahead of every lower class; takes KV from flex and bulk, never from interactive
        interactive   a person waiting on a streamed reply; takes KV from flex and bulk
        flex          interactive-shaped, but only on room the higher classes leave: the first of
                      them to lose its KV
        bulk          batch work; takes KV from nobody, and any other class may take its KV

    The names, ranks and preemption rule are contracts/service_tier.py's (the engine imports no
    package of ours; tests/engine/test_request_class.py holds the two together).
    """

    PRIORITY = "priority"
    INTERACTIVE = "interactive"
    FLEX = "flex"
    BULK = "bulk"

    @property
    def rank(self) -> int:
        """0 for the class served first."""
        return CLASS_ORDER.index(self)

    @property
    def is_interactive_shaped(self) -> bool:
        """A person waits on it as it streams: every class but bulk."""
        return self is not RequestClass.BULK


# Highest first: the order a step hands out its budget in.
CLASS_ORDER: tuple[RequestClass, ...] = tuple(RequestClass)

# Which running classes a request of a class may take KV blocks from (recompute preemption):
# never its own class or a higher one, and priority never interactive's (people on the default
# tier keep their replies). Listed lowest class first: the order victims are taken in.
PREEMPTS: dict[RequestClass, tuple[RequestClass, ...]] = {
    RequestClass.PRIORITY: (RequestClass.BULK, RequestClass.FLEX),
    RequestClass.INTERACTIVE: (RequestClass.BULK, RequestClass.FLEX),
    RequestClass.FLEX: (RequestClass.BULK,),
    RequestClass.BULK: (),
}

# A caller's first-token target (`slo_ttft_ms`) may be at most an hour.
MAX_SLO_TTFT_MS = 3_600_000


class FinishReason(enum.Enum):
    """Why a request stopped producing tokens."""

    STOP = "stop"  # an end-of-sequence token, a stop token id or a stop token sequence; under a
    # grammar, only where the text is complete under it (engine/grammar.py)
    LENGTH = "length"  # max_tokens reached, or the model's context is full
    CANCELLED = "cancelled"  # the caller cancelled it
    ABORTED = "aborted"  # the engine could never serve it (shutdown)
    # The grammar's matcher gave up mid-reply (a limit of llguidance's hit as the text grew, or
    # no token it allows): the text so far is incomplete under the grammar and never will be.
    GRAMMAR_FAILED = "grammar_failed"


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
    # A grammar the reply must follow, in llguidance's Lark dialect (engine/grammar.py): JSON
    # schemas as `start: %json {...}`, regexes, tool calls. None: unconstrained.
    grammar: str | None = None
    # Log-probabilities, as vLLM names them: None computes nothing; k reports each generated
    # token's log-probability and its k most likely alternatives (0 <= k <= MAX_LOGPROBS).
    logprobs: int | None = None
    # The same for the prompt's own tokens (all but the first), once (`echo` in completions).
    prompt_logprobs: int | None = None


# The most alternatives a token's log-probabilities may list (OpenAI's top_logprobs bound).
MAX_LOGPROBS = 20


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One generation request as the engine sees it.

    `resume_token_ids` are completion tokens already delivered elsewhere (a server died
    mid-reply): the engine reads them as context and continues after them exactly as if it had
    written them. They count towards `max_tokens` but are not emitted again.
    `cache_namespace` isolates prefix-cache entries (for example per team).
    `slo_ttft_ms` is the caller's first-token target, in ms from the request's arrival at the
    engine: within its class, a waiting request goes before those whose deadline (arrival +
    target) is later and before every request without one (1..MAX_SLO_TTFT_MS; None: no target).
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingParams
    request_class: RequestClass = RequestClass.INTERACTIVE
    resume_token_ids: tuple[int, ...] = ()
    cache_namespace: str = ""
    slo_ttft_ms: int | None = None


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
    # Log-probabilities of `new_token_ids`, one entry each, when the request asked for them.
    logprobs: TokenLogprobs | None = None
    # The prompt's, for its tokens 1..n-1, in the first output after they were computed.
    prompt_logprobs: TokenLogprobs | None = None


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """Log-probabilities of a run of tokens, and each one's `num_top` most likely alternatives.

        token_logprobs:  | t0 | t1 | t2 |                 one per token
        top_token_ids:   | t0's k ids | t1's k ids | ... | num_top per token, most likely first
        top_logprobs:    | (their log-probabilities, aligned with top_token_ids)          |

    Flat tuples, so a run of tokens travels as three tensors. A log-probability is never below
    LOGPROB_FLOOR (OpenAI's -9999.0 for a token the grammar or the float range rules out), so
    every value is a finite number JSON can carry.
    """

    token_logprobs: tuple[float, ...]
    top_token_ids: tuple[int, ...] = ()
    top_logprobs: tuple[float, ...] = ()
    num_top: int = 0

    def __len__(self) -> int:
        return len(self.token_logprobs)

    def __add__(self, other: TokenLogprobs) -> TokenLogprobs:
        """This run followed by `other` (same `num_top`)."""
        if self.num_top != other.num_top:
            raise ValueError(f"cannot join runs of {self.num_top} and {other.num_top} alternatives")
        return TokenLogprobs(
            self.token_logprobs + other.token_logprobs,
            self.top_token_ids + other.top_token_ids,
            self.top_logprobs + other.top_logprobs,
            self.num_top,
        )

    def slice(self, start: int, stop: int) -> TokenLogprobs:
        """Tokens [start, stop) of this run."""
        k = self.num_top
        top = slice(start * k, stop * k)
        return TokenLogprobs(self.token_logprobs[start:stop], self.top_token_ids[top], self.top_logprobs[top], k)


LOGPROB_FLOOR = -9999.0
