"""The engine's mutable record of one request: its tokens, how far they are computed, its KV.

Every sequence is "a list of known tokens, some of which are computed" (vLLM v1's framing):

    all_token_ids:  | prompt ........ | resumed ... | generated ........ |
                    0                 len(prompt)   num_prompt_tokens    num_tokens
    computed KV:    |<------ num_computed_tokens ------>|
                                       the rest is what the scheduler hands out next

A fresh prompt, a half-read prompt, a decode and a sequence recomputing after preemption are all
the same thing here: `num_tokens - num_computed_tokens` tokens want computing. Only when a
chunk reaches `num_tokens` does the model give logits and a new token get sampled.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.logprobs import LogprobRun
from engine.request import EngineRequest, FinishReason, RequestClass, SamplingParams

if TYPE_CHECKING:
    from llguidance import LLMatcher


class RequestStatus(enum.Enum):
    """Where a sequence stands in the scheduler's queues."""

    WAITING = "waiting"  # never admitted yet
    RUNNING = "running"  # admitted: holds KV blocks and is scheduled each step it can be
    PREEMPTED = "preempted"  # lost its blocks to memory pressure; waits to recompute
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    """One request inside the engine. Only the engine's step thread touches it.

    Compared by identity (`eq=False`): queues remove a sequence by identity, never by value.
    """

    request: EngineRequest
    # Engine-wide admission counter: smaller is older. Orders queues and picks "newest first"
    # preemption victims without comparing clocks.
    arrival: int
    all_token_ids: list[int]
    # Tokens known before this engine generated anything: prompt + resumed completion tokens.
    num_prompt_tokens: int
    # Ceiling on len(all_token_ids): prompt + max_tokens, capped by the model's context.
    max_total_tokens: int
    status: RequestStatus = RequestStatus.WAITING
    # When the caller wants its first token, on the engine's clock (arrival + slo_ttft_ms):
    # orders the waiting queue within the class. None: no target (after those with one).
    ttft_deadline: float | None = None
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    # Prompt tokens served from the prefix cache at first admission (what usage reports).
    num_cached_tokens: int = 0
    # Chain hashes of this sequence's full blocks, computed once and kept across preemption
    # (the tokens never change), so admission and registration never rehash.
    block_hashes: list[int] = field(default_factory=list)
    # How many leading blocks of block_table are already registered in the prefix cache.
    num_registered_blocks: int = 0
    num_preemptions: int = 0
    # How many generated tokens have been reported to the caller (the engine emits deltas).
    num_emitted_tokens: int = 0
    finish_reason: FinishReason | None = None
    # The grammar's state after every known token (resumed ones included); None: unconstrained.
    matcher: LLMatcher | None = None
    # Log-probabilities of the generated tokens (aligned with them) and of the prompt's tokens
    # 1..n-1, when the request asked; the prompt's are reported once, all together.
    logprobs: LogprobRun | None = None
    prompt_logprobs: LogprobRun | None = None
    prompt_logprobs_sent: bool = False

    @classmethod
    def from_request(
        cls, request: EngineRequest, arrival: int, max_model_len: int | None = None, *, arrival_s: float = 0.0
    ) -> Sequence:
        """Build the sequence for a validated request.

        `max_model_len` is the model's context window; without one only max_tokens bounds it.
        `arrival_s` is when it arrived, in seconds on the engine's clock (its TTFT deadline's origin).
        """
        tokens = [*request.prompt_token_ids, *request.resume_token_ids]
        ceiling = len(request.prompt_token_ids) + request.sampling.max_tokens
        if max_model_len is not None:
            ceiling = min(ceiling, max_model_len)
        params = request.sampling
        return cls(
            request=request,
            arrival=arrival,
            all_token_ids=tokens,
            num_prompt_tokens=len(tokens),
            max_total_tokens=ceiling,
            ttft_deadline=None if request.slo_ttft_ms is None else arrival_s + request.slo_ttft_ms / 1000,
            logprobs=None if params.logprobs is None else LogprobRun(params.logprobs),
            prompt_logprobs=None if params.prompt_logprobs is None else LogprobRun(params.prompt_logprobs),
        )

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def request_class(self) -> RequestClass:
        return self.request.request_class

    @property
    def sampling(self) -> SamplingParams:
        return self.request.sampling

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_generated_tokens(self) -> int:
        """Tokens this engine generated (what `completion_tokens` reports)."""
        return len(self.all_token_ids) - self.num_prompt_tokens

    @property
    def num_completion_tokens(self) -> int:
        """Reply length so far, resumed tokens included (what `max_tokens` bounds)."""
        return len(self.all_token_ids) - len(self.request.prompt_token_ids)

    @property
    def wants_prompt_logits(self) -> bool:
        """The prompt's log-probabilities are asked for and not all computed yet: its prompt is
        read in full (no prefix-cache hits), with logits at every position."""
        run = self.prompt_logprobs
        return run is not None and len(run) < len(self.request.prompt_token_ids) - 1

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    def append_token(self, token_id: int) -> None:
        self.all_token_ids.append(token_id)

    def reset_for_recompute(self) -> None:
        """Forget all computed state after the blocks were freed (recompute preemption)."""
        self.block_table.clear()
        self.num_computed_tokens = 0
        self.num_registered_blocks = 0
        self.num_preemptions += 1
        self.status = RequestStatus.PREEMPTED
