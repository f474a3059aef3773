"""`LlmApiEngineLoop`: TensorRT-LLM's LLM API behind the interface `bls.engine_host` drives.

    any thread (EngineHost)              event-loop thread (asyncio, owns every LLM call)
    ───────────────────────              ─────────────────────────────────────────────────
    submit(request) ─▶ validate ─▶ call_soon_threadsafe ─▶ admit: flex, bulk held while no room
                                                           ─▶ generate_async(streaming=True)
                                                                   │ async for each step:
    stream.drain() ◀── RequestStream.push(delta) ◀──────────────────┤  delta, stop sequences
    cancel(id) ─▶ call_soon_threadsafe ─▶ generation.abort() ───────┘  end: FINAL output
    stats() ◀── latest snapshot ◀── stats task: get_stats_async every stats_interval_s

Class → priority: from TensorRT-LLM 1.3 `generate_async` takes a priority and the executor
orders its queue by it (trtllm/generation_args.py). Where the pinned release has none
(`supports_priority` in build_engines/trtllm_pin.py; `with_priority=False`) the executor's queue
is first come, first served, so this loop keeps flex and bulk requests out of it while they
would take the room people need: priority and interactive requests always go in; flex and bulk
go in only while fewer than `max_batch_size - reserve` requests of any class are in the LLM
(reserve = an eighth of the batch, at least 1). The rest wait here, flex before bulk, oldest
first in each, and count as waiting in the published stats.

The same `RequestStream`s the CPU engine loop hands out, so `EngineHost` (streaming, client
cancels, metrics, heartbeat) and the tensor contract are shared code: only this file and its
neighbours know TensorRT-LLM. Every request gets exactly one final output, whatever happens
(finished, cancelled, stop sequence, engine error, shutdown).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.engine_loop import RequestStream
from engine.grammar import GrammarCompiler
from engine.grammar_check import GrammarValidator
from engine.llm_engine import request_problem
from engine.request import EngineRequest, FinishReason, RequestClass, RequestOutput
from engine.stats import EngineStats
from trtllm.generation_args import generation_args
from trtllm.llm_api import GenerationLike, LlmLike, SamplingParamsFactory
from trtllm.runtime_stats import RequestCounts, engine_stats, parse_stats_record
from trtllm.stop_sequences import StopSequenceMatcher

logger = logging.getLogger(__name__)

# Held back when the executor has no priorities, in the order they are released: flex first.
_HELD_CLASSES = (RequestClass.FLEX, RequestClass.BULK)

_FINISH_REASONS = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "cancelled": FinishReason.CANCELLED}


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """What requests are checked against before they reach the LLM, and the figures published
    until the first runtime stats arrive (from the generated model.yaml)."""

    vocab_size: int
    max_seq_len: int
    max_batch_size: int
    kv_tokens: int  # KV capacity the plan sized; the executor's own figure replaces it
    tokens_per_block: int
    end_id: int  # the checkpoint's end-of-sequence id (requests carry ids, never text)

    @property
    def interactive_reserve(self) -> int:
        """Batch slots flex and bulk leave free for people when the executor has no priorities."""
        return max(1, self.max_batch_size // 8)


@dataclass(slots=True, eq=False)  # compared by identity
class _Running:
    request: EngineRequest
    stream: RequestStream
    generation: GenerationLike | None = None
    cancel_requested: bool = False
    emitted: int = 0  # completion tokens this server generated and pushed
    cached: int = 0  # prompt tokens served from reused KV blocks


class LlmApiEngineLoop:
    """Runs `tensorrt_llm.LLM` requests on an asyncio loop of its own; see the module doc."""

    def __init__(
        self,
        llm: LlmLike,
        sampling_params: SamplingParamsFactory,
        limits: EngineLimits,
        *,
        with_priority: bool = False,
        stats_interval_s: float = 0.1,
        guided_decoding_params: Callable[..., Any] | None = None,
        grammars: GrammarCompiler | None = None,
    ) -> None:
        """`grammars` (the checkpoint's tokenizer): checks that a constrained reply TensorRT-LLM
        ended `stop` is complete under its grammar; one that is not ends GRAMMAR_FAILED."""
        self._llm = llm
        self._grammars = grammars
        # `tensorrt_llm.sampling_params.GuidedDecodingParams`: None serves no grammar.
        self._guided_decoding_params = guided_decoding_params
        self._grammar_check = GrammarValidator()  # llguidance's verdict, under the engines' limits
        self._with_priority = with_priority
        self._sampling_params = sampling_params
        self._limits = limits
        self._stats_interval_s = stats_interval_s
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}  # submitted, not finished (held ones too)
        # Flex and bulk requests waiting for room beside people, flex first (event-loop thread only).
        self._held: dict[RequestClass, deque[_Running]] = {cls: deque() for cls in _HELD_CLASSES}
        self._in_llm: dict[RequestClass, int] = dict.fromkeys(RequestClass, 0)  # event-loop thread only
        self._latest_record: dict[str, object] | None = None
        self._fallback = EngineStats(
            max_blocks=limits.kv_tokens // limits.tokens_per_block,
            free_blocks=limits.kv_tokens // limits.tokens_per_block,
            used_blocks=0,
            tokens_per_block=limits.tokens_per_block,
            reused_blocks=0,
            active_requests=0,
            max_requests=limits.max_batch_size,
            scheduled_requests=0,
            context_requests=0,
            waiting_requests=0,
        )

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop.run_forever, name="trtllm-event-loop", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._poll_stats(), self._loop)

    def stop(self, timeout: float | None = None) -> None:
        """Abort what runs (each request ends with a final output), stop the loop, shut the LLM down."""
        if self._thread is None:
            return
        finishing = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        try:
            finishing.result(timeout)
        except concurrent.futures.TimeoutError:
            logger.warning("requests did not finish within %s s of the shutdown", timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._thread = None
        self._llm.shutdown()

    # --- any thread --------------------------------------------------------------------------

    def submit(self, request: EngineRequest, notify: Callable[[], None] | None = None) -> RequestStream:
        """Start streaming `request`. Raises ValueError when it cannot be served as sent."""
        problem = request_problem(request, self._limits.vocab_size, self._limits.max_seq_len)
        if problem is None:
            problem = self._unserved(request)
        if problem is not None:
            raise ValueError(problem)
        entry = _Running(request, RequestStream(request.request_id, notify))
        with self._lock:
            if request.request_id in self._running:
                raise ValueError(f"request id {request.request_id!r} is already running")
            self._running[request.request_id] = entry
        self._loop.call_soon_threadsafe(self._admit, entry)
        return entry.stream

    def _unserved(self, request: EngineRequest) -> str | None:
        """What this path does not serve yet, or a grammar llguidance refuses (the same library
        and limits the engine's `llguidance` backend compiles it with)."""
        sampling = request.sampling
        if sampling.logprobs is not None or sampling.prompt_logprobs is not None:
            return "log-probabilities are not served on the TensorRT-LLM path yet"
        if sampling.grammar is None:
            return None
        if self._guided_decoding_params is None:
            return "this engine was started without guided decoding"
        if request.resume_token_ids:
            # TensorRT-LLM starts the grammar at the prompt's end: resumed tokens would be masked
            # as if they were the reply's first, so a constrained reply is not resumed here.
            return "a constrained reply cannot be resumed on the TensorRT-LLM path"
        return self._grammar_check.problem(sampling.grammar)

    def _with_grammar(self, request: EngineRequest, sampling: dict[str, Any]) -> dict[str, Any]:
        """`sampling` with the request's grammar as TensorRT-LLM's guided decoding: llguidance's
        Lark is the `grammar` guide of its `llguidance` backend (model.yaml turns it on)."""
        grammar = request.sampling.grammar
        if grammar is None or self._guided_decoding_params is None:
            return sampling
        return {**sampling, "guided_decoding": self._guided_decoding_params(grammar=grammar)}

    def cancel(self, request_id: str) -> None:
        self._loop.call_soon_threadsafe(self._cancel, request_id)

    def stats(self) -> EngineStats:
        with self._lock:
            record = self._latest_record
            by_class = dict.fromkeys(RequestClass, 0)
            for entry in self._running.values():
                by_class[entry.request.request_class] += 1
            held = sum(len(queue) for queue in self._held.values())
        counts = RequestCounts(
            priority=by_class[RequestClass.PRIORITY],
            interactive=by_class[RequestClass.INTERACTIVE],
            flex=by_class[RequestClass.FLEX],
            bulk=by_class[RequestClass.BULK],
            held=held,
        )
        return engine_stats(record, counts, self._fallback)

    # --- event-loop thread -------------------------------------------------------------------

    def _admit(self, entry: _Running) -> None:
        held = self._held.get(entry.request.request_class)
        if held is not None and not self._with_priority:
            held.append(entry)
            self._release_held()
        else:
            self._start(entry)

    def _release_held(self) -> None:
        """Start held requests, flex before bulk, oldest first, while the LLM has room beside people."""
        room = self._limits.max_batch_size - self._limits.interactive_reserve - sum(self._in_llm.values())
        for held in self._held.values():
            while held and room > 0:
                self._start(held.popleft())
                room -= 1

    def _start(self, entry: _Running) -> None:
        self._in_llm[entry.request.request_class] += 1
        self._loop.create_task(self._generate(entry))

    async def _generate(self, entry: _Running) -> None:
        request = entry.request
        args = generation_args(request, self._limits.end_id, with_priority=self._with_priority)
        stops = StopSequenceMatcher(request.sampling.stop_token_sequences, request.resume_token_ids)
        try:
            if entry.cancel_requested:
                return self._finish(entry, (), FinishReason.CANCELLED)
            entry.generation = self._llm.generate_async(
                args.inputs,
                self._sampling_params(**self._with_grammar(request, args.sampling)),
                streaming=True,
                **args.extra,
            )
            async for step in entry.generation:
                completion = step.outputs[0]
                new = tuple(completion.token_ids[entry.emitted :])
                entry.cached = _cached_tokens(step, entry.cached)
                keep = stops.feed(new)
                if keep is not None:
                    entry.generation.abort()
                    return self._finish(entry, new[:keep], FinishReason.STOP)
                if step.finished:
                    reason = _FINISH_REASONS.get(completion.finish_reason or "", FinishReason.ABORTED)
                    if reason is FinishReason.STOP and not await self._complete(request, completion.token_ids):
                        reason = FinishReason.GRAMMAR_FAILED
                    return self._finish(entry, new, FinishReason.CANCELLED if entry.cancel_requested else reason)
                if new:
                    entry.emitted += len(new)
                    entry.stream.push(_output(entry, new, None))
            # The iteration ended without a finished step: cancelled, or lost.
            self._finish(entry, (), FinishReason.CANCELLED if entry.cancel_requested else FinishReason.ABORTED)
        except Exception:
            if not entry.cancel_requested:
                logger.exception("TensorRT-LLM request %r failed", request.request_id)
            self._finish(entry, (), FinishReason.CANCELLED if entry.cancel_requested else FinishReason.ABORTED)
        finally:
            self._in_llm[request.request_class] -= 1
            self._release_held()

    async def _complete(self, request: EngineRequest, token_ids: Sequence[int]) -> bool:
        """Whether a reply TensorRT-LLM ended `stop` is complete under the request's grammar (True
        without one, or without the tokenizer to tell). Its llguidance matcher, once it gives up
        mid-reply (a limit hit), allows only the end token, so `stop` alone proves nothing."""
        grammar = request.sampling.grammar
        if grammar is None or self._grammars is None:
            return True
        tokens = [*request.resume_token_ids, *token_ids]
        complete = await asyncio.to_thread(self._grammars.completes, grammar, tokens)
        if not complete:
            logger.warning("TensorRT-LLM ended %r `stop` with its grammar incomplete", request.request_id)
        return complete

    def _finish(self, entry: _Running, new: tuple[int, ...], reason: FinishReason) -> None:
        """The request's final output; called once it is out of the LLM (or never went in)."""
        with self._lock:
            self._running.pop(entry.request.request_id, None)
        entry.emitted += len(new)
        entry.stream.push(_output(entry, new, reason))

    def _cancel(self, request_id: str) -> None:
        with self._lock:
            entry = self._running.get(request_id)
        if entry is None or entry.cancel_requested:
            return
        entry.cancel_requested = True
        held = self._held.get(entry.request.request_class)
        if held is not None and entry in held:
            held.remove(entry)
            self._finish(entry, (), FinishReason.CANCELLED)
        elif entry.generation is not None:
            entry.generation.abort()

    async def _shutdown(self) -> None:
        """Abort every request, then end the loop's other tasks (the stats poller, generations)."""
        await self._abort_all()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _abort_all(self) -> None:
        """Shutdown: every unfinished request ends ABORTED, before its generation is aborted.
        Aborting first would end the quick ones "cancelled", which clients read as a stop they
        asked for (OpenAI's "stop"), not as the server failing them."""
        for held in self._held.values():
            held.clear()
        with self._lock:
            entries = list(self._running.values())
        for entry in entries:
            entry.cancel_requested = True  # a task not started yet must not reach the LLM
            self._finish(entry, (), FinishReason.ABORTED)
            if entry.generation is not None:
                entry.generation.abort()

    async def _poll_stats(self) -> None:
        """Keep the latest runtime stats record; an LLM without iteration stats leaves the
        fallback figures (bounded by the loop's own counts) in place."""
        while True:
            try:
                async for record in self._llm.get_stats_async(timeout=self._stats_interval_s):
                    parsed = dict(parse_stats_record(record))
                    with self._lock:
                        self._latest_record = parsed
            except Exception:
                logger.exception("reading TensorRT-LLM runtime stats failed")
            await asyncio.sleep(self._stats_interval_s)


def _output(entry: _Running, new: tuple[int, ...], reason: FinishReason | None) -> RequestOutput:
    return RequestOutput(
        request_id=entry.request.request_id,
        new_token_ids=new,
        finished=reason is not None,
        finish_reason=reason,
        prompt_tokens=len(entry.request.prompt_token_ids),
        cached_tokens=entry.cached,
        completion_tokens=entry.emitted,
    )


def _cached_tokens(step: GenerationLike, known: int) -> int:
    """Prompt tokens served from reused KV blocks, where this release reports them."""
    value = getattr(step, "cached_tokens", None)
    return value if isinstance(value, int) else known
