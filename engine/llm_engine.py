"""`LLMEngine`: one server's worth of inflight batching, driven one `step()` at a time.

A step is: apply cancellations, plan (scheduler), compute (model), sample, stop-check, report.

    add_request ─▶ Scheduler ─▶ SequenceChunk list ─▶ model.forward ─▶ logits
                                                                        │ grammar masks (batched)
                                                                        │ sample_token, logprobs
    RequestOutput deltas ◀── stop check (eos, grammar done, stop ids/sequences, max_tokens) ◀┘

Under a grammar the reply ends STOP only when its text is complete under it; a matcher that
gives up mid-reply ends it GRAMMAR_FAILED, never STOP or LENGTH (engine/grammar.py).

Not thread-safe: one thread owns an engine (see `EngineLoop` for the threaded host). The only
exception is `validate_request`, which reads nothing mutable.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from engine.config import EngineConfig, ModelConfig
from engine.forward_batch import Model, SequenceChunk, logit_rows
from engine.grammar import GrammarCompiler, GrammarError, apply_masks
from engine.grammar_check import matcher_failure
from engine.logprobs import token_logprobs
from engine.request import (
    MAX_LOGPROBS,
    MAX_SLO_TTFT_MS,
    EngineRequest,
    FinishReason,
    RequestClass,
    RequestOutput,
)
from engine.sampling import sample_token
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import Sequence
from engine.stats import EngineStats

logger = logging.getLogger(__name__)


class LLMEngine:
    """Serves `EngineRequest`s with a `Model` over a paged KV cache sized by `config`.

    `max_model_len` is the model's context window (prompt + reply); a reply that reaches it
    ends with LENGTH. Without one, only max_tokens and the KV capacity bound a request.
    `grammars` compiles and applies the grammars requests may carry; without one (a model with
    no tokenizer) a request with a grammar is refused. `clock` (seconds) stamps each request's
    arrival, the origin of its TTFT deadline (`slo_ttft_ms`).
    """

    def __init__(
        self,
        config: EngineConfig,
        model: Model,
        max_model_len: int | None = None,
        grammars: GrammarCompiler | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.model = model
        self.max_model_len = max_model_len
        self.grammars = grammars
        self._clock = clock
        self.scheduler = Scheduler(config)
        self._vocab_size = model.vocab_size
        self._eos_token_id = model.eos_token_id
        self._next_arrival = 0
        self._pending_cancels: list[str] = []
        self._last_num_scheduled = 0
        self._last_num_context = 0

    @classmethod
    def from_pretrained(cls, model_dir: Path, config: EngineConfig) -> LLMEngine:
        """An engine over the HF checkpoint in `model_dir`, its KV cache sized by `config`."""
        from engine.model import NumpyLlama  # numpy weights load only when asked for

        model = NumpyLlama.from_pretrained(model_dir, num_blocks=config.num_blocks, block_size=config.block_size)
        max_model_len = ModelConfig.from_pretrained(model_dir).max_position_embeddings
        grammars = GrammarCompiler.from_model_dir(model_dir, model.vocab_size, model.eos_token_id)
        return cls(config, model, max_model_len=max_model_len, grammars=grammars)

    # -- requests ---------------------------------------------------------------------------

    def validate_request(self, request: EngineRequest) -> None:
        """Raise ValueError saying what to change if `request` cannot be served as given.

        Thread-safe: it reads only the model's fixed properties, and compiles the request's
        grammar (into the compiler's cache, so that `add_request` on the step thread finds it
        there): a caller's thread pays for the compile, never the step.
        """
        problem = request_problem(request, self._vocab_size, self.max_model_len)
        if problem is None and request.sampling.grammar is not None:
            problem = self._grammar_problem(request)
        if problem is not None:
            raise ValueError(f"request {request.request_id!r}: {problem}")

    def _grammar_problem(self, request: EngineRequest) -> str | None:
        grammar = request.sampling.grammar
        assert grammar is not None
        if self.grammars is None:
            return "this model has no tokenizer.json to follow a grammar with"
        try:
            # Compiled, the resumed tokens (if any) followed, and a next token possible: a grammar
            # whose lexer outgrew its limits on an earlier reply is refused here, not cut mid-reply.
            return self.grammars.next_token_problem(grammar, request.resume_token_ids)
        except (GrammarError, ValueError) as exc:
            return str(exc)

    def add_request(self, request: EngineRequest) -> None:
        """Queue a request; it is scheduled from the next step on."""
        self.validate_request(request)
        if self.scheduler.get(request.request_id) is not None:
            raise ValueError(f"request {request.request_id!r} is already running; use a new request_id")
        seq = Sequence.from_request(request, self._next_arrival, self.max_model_len, arrival_s=self._clock())
        if request.sampling.grammar is not None:
            assert self.grammars is not None  # validate_request refuses a grammar without one
            # A resumed reply continues the grammar where the previous server left it.
            seq.matcher = self.grammars.matcher_after(request.sampling.grammar, request.resume_token_ids)
        self._next_arrival += 1
        self.scheduler.add(seq)

    def cancel(self, request_id: str) -> bool:
        """Cancel at the next step (its blocks are freed then). False if the id is not running."""
        if self.scheduler.get(request_id) is None:
            return False
        self._pending_cancels.append(request_id)
        return True

    def abort_all(self) -> list[RequestOutput]:
        """Finish every unfinished request with ABORTED now (shutdown)."""
        outputs = [self._output(seq) for seq in self.scheduler.pop_aborted()]
        for seq in self.scheduler.unfinished():
            self.scheduler.finish_sequence(seq, FinishReason.ABORTED)
            outputs.append(self._output(seq))
        self._pending_cancels.clear()
        return outputs

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # -- the step ---------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one engine step; return an output per request that gained tokens or finished."""
        outputs = self._apply_cancels()
        plan = self.scheduler.schedule()
        outputs.extend(self._output(seq) for seq in plan.aborted)
        self._last_num_scheduled = len(plan.scheduled)
        self._last_num_context = plan.num_context
        if not plan.scheduled:
            return outputs
        chunks = [self._chunk(seq, num_tokens) for seq, num_tokens in plan.scheduled]
        try:
            logits = self._forward(chunks)
        except Exception:
            logger.exception("model.forward failed; aborting the %d requests of this step", len(chunks))
            for seq, _ in plan.scheduled:
                self.scheduler.finish_sequence(seq, FinishReason.ABORTED)
                outputs.append(self._output(seq))
            return outputs
        self.scheduler.update_after_step(plan)
        outputs.extend(self._sample_and_stop(plan, chunks, logits))
        return outputs

    def _apply_cancels(self) -> list[RequestOutput]:
        outputs = []
        for request_id in self._pending_cancels:
            seq = self.scheduler.finish(request_id, FinishReason.CANCELLED)
            if seq is not None:
                outputs.append(self._output(seq))
        self._pending_cancels.clear()
        return outputs

    def _chunk(self, seq: Sequence, num_tokens: int) -> SequenceChunk:
        start = seq.num_computed_tokens
        end = start + num_tokens
        return SequenceChunk(
            token_ids=tuple(seq.all_token_ids[start:end]),
            start_position=start,
            block_table=tuple(seq.block_table),
            need_logits=end == seq.num_tokens,
            all_logits=seq.wants_prompt_logits,
        )

    def _forward(self, chunks: list[SequenceChunk]) -> npt.NDArray[np.float32]:
        logits = self.model.forward(chunks)
        expected = sum(logit_rows(chunk) for chunk in chunks)
        if logits.ndim != 2 or logits.shape[0] != expected:
            raise ValueError(f"model returned logits of shape {logits.shape}, expected ({expected}, vocab)")
        return logits

    def _sample_and_stop(
        self, plan: SchedulerOutput, chunks: list[SequenceChunk], logits: npt.NDArray[np.float32]
    ) -> list[RequestOutput]:
        outputs = []
        sampled: list[tuple[Sequence, int]] = []  # (sequence, its row of logits to sample from)
        row = 0
        for (seq, _), chunk in zip(plan.scheduled, chunks, strict=True):
            rows = logit_rows(chunk)
            if chunk.all_logits:
                _collect_prompt_logprobs(seq, chunk, logits[row : row + rows])
            if chunk.need_logits:  # else a middle slice of a prompt: nothing to report yet
                sampled.append((seq, row + rows - 1))
            row += rows
        failed = self._mask(sampled, logits)
        for seq, row in sampled:
            token_id = None
            reason: FinishReason | None = failed.get(seq)
            if reason is None:
                try:
                    # The index counts resumed tokens: a resumed reply draws what the original would.
                    token_id = sample_token(logits[row], seq.sampling, seq.num_completion_tokens)
                    if seq.logprobs is not None:
                        seq.logprobs.extend(token_logprobs(logits[row : row + 1], (token_id,), seq.logprobs.num_top))
                except Exception:  # bad logits for one request must not take the others down
                    logger.exception("sampling failed for %r; aborting it", seq.request_id)
                    token_id = None
            if reason is not None:
                pass  # its grammar failed: nothing was sampled
            elif token_id is None:
                reason = FinishReason.ABORTED
            else:
                seq.append_token(token_id)
                reason = self._stop_reason(seq, token_id)
            if reason is not None:
                self.scheduler.finish_sequence(seq, reason)
            outputs.append(self._output(seq))
        return outputs

    def _mask(
        self, sampled: list[tuple[Sequence, int]], logits: npt.NDArray[np.float32]
    ) -> dict[Sequence, FinishReason]:
        """Mask the rows of constrained sequences to what their grammars allow, all at once;
        the sequences that cannot go on, each with its end: GRAMMAR_FAILED where its matcher
        gave up (it would allow only the end-of-sequence token: no STOP for a cut text),
        ABORTED where the masks could not be made at all."""
        constrained = [(seq, row) for seq, row in sampled if seq.matcher is not None]
        if not constrained:
            return {}
        assert self.grammars is not None
        try:
            bitmask = self.grammars.fill_masks([seq.matcher for seq, _ in constrained])  # type: ignore[misc]
            apply_masks(logits, [row for _, row in constrained], bitmask)
        except Exception:
            logger.exception("grammar masks failed for %d requests; aborting them", len(constrained))
            return dict.fromkeys((seq for seq, _ in constrained), FinishReason.ABORTED)
        failed = {}
        for i, (seq, _) in enumerate(constrained):
            assert seq.matcher is not None
            problem = matcher_failure(seq.matcher, bitmask[i])
            if problem is not None:
                logger.warning("grammar gave up on %r after %d tokens: %s",
                               seq.request_id, seq.num_completion_tokens, problem)  # fmt: skip
                failed[seq] = FinishReason.GRAMMAR_FAILED
        return failed

    def _stop_reason(self, seq: Sequence, token_id: int) -> FinishReason | None:
        params = seq.sampling
        matcher = seq.matcher
        if matcher is not None:
            # The end-of-sequence token too: the matcher takes it only where the text is complete.
            if not matcher.consume_token(token_id):
                logger.warning("grammar refused a token it allowed for %r: %s", seq.request_id, matcher.get_error())
                return FinishReason.GRAMMAR_FAILED
            if matcher.is_stopped():  # complete, and nothing but the end may follow
                return FinishReason.STOP
        elif token_id == self._eos_token_id and not params.ignore_eos:
            return FinishReason.STOP
        if token_id in params.stop_token_ids:
            return FinishReason.STOP
        completion = seq.num_completion_tokens
        for stop in params.stop_token_sequences:
            if len(stop) <= completion and tuple(seq.all_token_ids[-len(stop) :]) == stop:
                return FinishReason.STOP
        if completion >= params.max_tokens or seq.num_tokens >= seq.max_total_tokens:
            return FinishReason.LENGTH
        return None

    def _output(self, seq: Sequence) -> RequestOutput:
        """The delta since this request's previous output, with running totals."""
        first_new = seq.num_prompt_tokens + seq.num_emitted_tokens
        new_token_ids = tuple(seq.all_token_ids[first_new:])
        logprobs = None if seq.logprobs is None else seq.logprobs.since(seq.num_emitted_tokens)
        seq.num_emitted_tokens += len(new_token_ids)
        prompt_logprobs = None
        if seq.prompt_logprobs is not None and not seq.prompt_logprobs_sent and not seq.wants_prompt_logits:
            prompt_logprobs = seq.prompt_logprobs.since(0)
            seq.prompt_logprobs_sent = True
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=new_token_ids,
            finished=seq.is_finished,
            finish_reason=seq.finish_reason,
            prompt_tokens=len(seq.request.prompt_token_ids),
            cached_tokens=seq.num_cached_tokens,
            completion_tokens=seq.num_generated_tokens,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
        )

    # -- load -------------------------------------------------------------------------------

    def stats(self) -> EngineStats:
        scheduler = self.scheduler
        bm = scheduler.block_manager
        return EngineStats(
            max_blocks=bm.num_blocks,
            free_blocks=bm.num_free_blocks,
            used_blocks=bm.num_used_blocks,
            tokens_per_block=bm.block_size,
            reused_blocks=bm.num_reused_blocks,
            active_requests=scheduler.num_running,
            max_requests=self.config.max_num_seqs,
            scheduled_requests=self._last_num_scheduled,
            context_requests=self._last_num_context,
            waiting_requests=scheduler.num_waiting,
            priority_requests=scheduler.num_unfinished(RequestClass.PRIORITY),
            interactive_requests=scheduler.num_unfinished(RequestClass.INTERACTIVE),
            flex_requests=scheduler.num_unfinished(RequestClass.FLEX),
            bulk_requests=scheduler.num_unfinished(RequestClass.BULK),
            priority_blocks=scheduler.held_blocks(RequestClass.PRIORITY),
            interactive_blocks=scheduler.held_blocks(RequestClass.INTERACTIVE),
            flex_blocks=scheduler.held_blocks(RequestClass.FLEX),
            bulk_blocks=scheduler.held_blocks(RequestClass.BULK),
            preemptions=tuple((cls.value, count) for cls, count in scheduler.preemptions.items()),
        )


def request_problem(request: EngineRequest, vocab_size: int, max_model_len: int | None) -> str | None:
    """What is wrong with `request`, in words a caller can act on; None when it can be served."""
    params = request.sampling
    if not request.request_id:
        return "request_id must be a non-empty string"
    if not request.prompt_token_ids:
        return "the prompt is empty; send at least one token"
    if params.max_tokens < 1:
        return f"max_tokens must be >= 1, got {params.max_tokens}"
    if request.slo_ttft_ms is not None and not 0 < request.slo_ttft_ms <= MAX_SLO_TTFT_MS:
        return f"slo_ttft_ms must be in [1, {MAX_SLO_TTFT_MS}] ms, got {request.slo_ttft_ms}"
    if len(request.resume_token_ids) >= params.max_tokens:
        return (
            f"{len(request.resume_token_ids)} resumed tokens leave nothing to generate "
            f"under max_tokens={params.max_tokens}"
        )
    known = len(request.prompt_token_ids) + len(request.resume_token_ids)
    if max_model_len is not None and known >= max_model_len:
        return f"{known} prompt tokens leave no room in the model's context of {max_model_len}"
    for token_id in (*request.prompt_token_ids, *request.resume_token_ids):
        if not 0 <= token_id < vocab_size:
            return f"token id {token_id} is outside the vocabulary [0, {vocab_size})"
    if not (params.temperature >= 0 and math.isfinite(params.temperature)):
        return f"temperature must be a finite number >= 0, got {params.temperature}"
    if not 0 < params.top_p <= 1:
        return f"top_p must be in (0, 1], got {params.top_p}"
    if params.top_k < 0:
        return f"top_k must be >= 0 (0 disables it), got {params.top_k}"
    if any(not stop for stop in params.stop_token_sequences):
        return "stop_token_sequences must not contain an empty sequence"
    for name, count in (("logprobs", params.logprobs), ("prompt_logprobs", params.prompt_logprobs)):
        if count is not None and not 0 <= count <= min(MAX_LOGPROBS, vocab_size):
            return f"{name} must be in [0, {min(MAX_LOGPROBS, vocab_size)}] alternatives, got {count}"
    return None


def _collect_prompt_logprobs(seq: Sequence, chunk: SequenceChunk, rows: npt.NDArray[np.float32]) -> None:
    """Add the prompt log-probabilities that `rows` (one per position of `chunk`) hold.

    Row j is the distribution after position start + j, so it scores the prompt token at
    start + j + 1. Positions already scored (a prompt recomputed after preemption) are skipped;
    resumed reply tokens are not the prompt's and are never scored here."""
    run = seq.prompt_logprobs
    assert run is not None
    prompt = seq.request.prompt_token_ids
    first_target = chunk.start_position + 1
    start = len(run) + 1 - first_target  # the row that scores the first token not scored yet
    stop = min(len(rows), len(prompt) - first_target)
    if 0 <= start < stop:
        targets = prompt[first_target + start : first_target + stop]
        run.extend(token_logprobs(rows[start:stop], targets, run.num_top))
