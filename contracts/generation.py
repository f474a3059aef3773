"""The seam between the gateway and whatever generates tokens.

The HTTP layer never talks to Triton directly: it hands a `GenerationRequest` to a
`GenerationBackend` and reads `GenerationDelta`s back. `FailoverBackend` (router/failover_backend.py,
streaming through router/triton_backend.py) is the real one; unit tests inject a fake through
`create_app(backend_factory=...)`.

Cancellation contract (both ways must free the server's KV):

- closing the iterator `generate()` returned (`aclose()`, or cancelling the task reading it)
  cancels the server-side stream;
- `cancel(request_id)` stops a stream from outside the task that reads it: that `generate()`
  then yields a last delta with `finish_reason="cancelled"` and ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from config.tier_names import RequestClass as RequestClass  # re-exported: a request's class
from contracts.token_ids import PackedTokenIds

# Values of the `llm` model's `finish_reason` output (docs/tensors.md): engine.request.FinishReason's.
FINISH_REASONS = frozenset({"stop", "length", "cancelled", "aborted", "grammar_failed"})
# The reply's grammar gave up mid-reply (a limit of llguidance's hit): the text is incomplete
# under it. The doors answer it as an error (contracts.errors.grammar_failed), never as a stop.
GRAMMAR_FAILED = "grammar_failed"


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one request. `cached_tokens` is the part of the prompt served from the
    prefix cache; `completion_tokens` counts the reply's tokens the client got so far (what is
    billed); `discarded_tokens` what the engine wrote past the reply's end (a stop string,
    before its cancel landed): metered, never billed as completion."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    discarded_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counts a client is shown (`discarded_tokens` goes to the usage records only)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
        }


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One validated generation, as the backend needs it. `None` sampling fields mean "the
    model's default" and are not sent."""

    request_id: str
    model_id: str
    prompt: str
    max_tokens: int
    stop: tuple[str, ...] = ()
    request_class: RequestClass = "interactive"
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    ignore_eos: bool = False
    # Completion tokens already delivered to the client (resume after a server died).
    resume_token_ids: tuple[int, ...] = ()
    # Prefix-cache isolation key (the team, once the gateway knows teams).
    cache_namespace: str = ""
    # The prompt's token ids as the gateway encoded it (contracts/prompt_context.py), sent in its
    # place so the server does not tokenize it again; empty: the server tokenizes `prompt`.
    prompt_token_ids: PackedTokenIds = field(default_factory=PackedTokenIds)
    # For routing (never sent to a server): the prompt's length in tokens and the chained
    # hashes of its leading full blocks, namespaced like the cache (router/block_hashes.py).
    prompt_tokens: int = 0
    prefix_block_hashes: tuple[int, ...] = ()
    # Structured output: the grammar the reply follows, in llguidance's Lark dialect
    # (contracts/guided_grammar.py builds it); None: unconstrained.
    guided_grammar: str | None = None
    # Log-probabilities: k alternatives per generated token (0..20), and the prompt's own (echo);
    # None: not computed. A resumed reply's prompt log-probabilities were sent by the first server.
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    # The caller's target for its first token, in ms from arrival (`x-slo-ttft-ms`): a server
    # orders waiting work within a class by it (earliest deadline first); None: no target.
    slo_ttft_ms: int | None = None


@dataclass(frozen=True, slots=True)
class GenerationDelta:
    """What one backend response added. `usage` holds the server's totals so far when it sent
    them; `finish_reason` is set on the last delta only."""

    text: str = ""
    token_ids: tuple[int, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    # Of `token_ids` (one each), when the request asked; the prompt's once, when asked.
    logprobs: Logprobs | None = None
    prompt_logprobs: Logprobs | None = None


@dataclass(frozen=True, slots=True)
class Logprobs:
    """Log-probabilities of a run of tokens, each with its k most likely alternatives
    (flattened: token i's are [i*k, (i+1)*k), most likely first). Never below -9999.0."""

    token_logprobs: tuple[float, ...]
    top_token_ids: tuple[int, ...] = ()
    top_logprobs: tuple[float, ...] = ()

    @property
    def num_top(self) -> int:
        return len(self.top_token_ids) // len(self.token_logprobs) if self.token_logprobs else 0

    def top(self, index: int) -> list[tuple[int, float]]:
        """Token `index`'s alternatives as (token id, log-probability), most likely first."""
        k = self.num_top
        ids, values = self.top_token_ids[index * k : (index + 1) * k], self.top_logprobs[index * k : (index + 1) * k]
        return list(zip(ids, values, strict=True))


@dataclass(frozen=True, slots=True)
class PoolReadiness:
    """Whether one pool's server can take requests, and if not, why."""

    pool_id: str
    model_id: str
    ready: bool
    detail: str = ""


class BackendError(Exception):
    """The backend failed a request (a server-side error, a broken stream)."""


class BackendUnavailable(BackendError):
    """No server could take the request right now; retrying later may succeed."""

    def __init__(self, message: str, retry_after_s: int = 5) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestRejected(BackendError):
    """A model server refused the request's input (a value out of the engine's range, a prompt
    it cannot fit): the caller's to fix, and every server would refuse it too. Never a reason
    to try another server, to mark this one bad, or to retry a batch entry."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@runtime_checkable
class TtftPredictor(Protocol):
    """A backend that can tell how soon a request's first token could come (the router's view)."""

    def predicted_ttft_s(self, model_id: str, request_tokens: int, prefix_block_hashes: Sequence[int]) -> float | None:
        """Seconds to the first token on the best server for it; None when it cannot tell (no
        server ready, or the pool has no `prefill_tokens_per_s`)."""
        ...


class GenerationBackend(Protocol):
    """What the gateway needs from the layer that runs models."""

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        """Stream the deltas of one request; the last one carries `finish_reason`.

        Raises `BackendUnavailable` when no server can take it, `RequestRejected` when a server
        refused its input, `BackendError` on failure.
        """
        ...

    async def cancel(self, request_id: str) -> bool:
        """Stop the in-flight request `request_id`; False if this backend is not running it."""
        ...

    async def readiness(self) -> list[PoolReadiness]:
        """One entry per pool: is its server ready with its models loaded."""
        ...

    async def close(self) -> None:
        """Release connections; called once at shutdown."""
        ...
