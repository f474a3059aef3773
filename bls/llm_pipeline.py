"""The `llm` BLS orchestration: one reply from prompt text to streamed text deltas.

    parse inputs ─▶ preprocessing ─▶ engine (decoupled stream) ─┬─▶ postprocessing ─▶ client
         │                     ▲ ▲                               │    per engine response
         └─ input_ids: checked ┘ └── cancel_request_id ◀─────────┴── stop string hit, or the
            in process, no BLS call                                  client cancelled

A prompt that arrives as token ids (the gateway's: it tokenized the prompt for its context
check) skips the `preprocessing` call; everything after it is the same for both.

Each engine response (the engine merges steps when we read slowly) goes through one
postprocessing call, whose state (detokenizer offsets, held-back text) this loop carries. On a
stop string the reply keeps its tokens through the one the stop ends in, cancels the engine and
reads it to its end, so the FINAL's usage says exactly what the client got (`completion_tokens`)
and what the engine wrote beyond it (`discarded_tokens`), whatever the timing. With
`stream=false` the deltas are accumulated into one response. Every path ends in exactly one
FINAL response; an error is a Triton error on that final response.

The BLS calls are injected (`LlmStages`), so the whole flow is tested without Triton;
`bls/triton_stages.py` implements them with `pb_utils`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bls.llm_request import LlmRequest, parse_llm_request
from bls.logprob_tensors import logprob_tensors
from bls.postprocessing import PostprocessResult, PostprocessState
from bls.preprocessing import Preprocessed
from bls.tensors import InputError, Outputs, ResponseSink, TensorSource
from contracts.latency_log import LatencyLog
from contracts.llm_tensors import (
    CACHED_TOKENS,
    COMPLETION_TOKENS,
    DISCARDED_TOKENS,
    FINISH_REASON,
    OUTPUT_LOGPROB_TENSORS,
    OUTPUT_TOKEN_IDS,
    PROMPT_LOGPROB_TENSORS,
    PROMPT_TOKENS,
    TEXT_OUTPUT,
    invalid_input_message,
)
from engine.request import EngineRequest, FinishReason, RequestOutput, TokenLogprobs

logger = logging.getLogger(__name__)


class StageError(RuntimeError):
    """A stage model answered with an error; the message starts with the model's name."""


class LlmStages(Protocol):
    """The three models `llm` calls (BLS in production, fakes in tests)."""

    async def preprocess(self, prompt: str, stops: Sequence[str]) -> Preprocessed: ...

    def preprocess_tokenized(self, input_ids: tuple[int, ...], stops: Sequence[str]) -> Preprocessed:
        """What `preprocess` gives for a prompt already tokenized, without calling a model (the
        ids checked against the vocabulary, the stop strings encoded); InputError for bad ids."""
        ...

    def generate(self, request: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        """Stream the engine's outputs for `request`; the last one has `finished` set.

        A caller that stops reading early must `cancel` the request first; closing the
        iterator then waits (off the event loop) for the engine's final response.
        """
        ...

    async def cancel(self, request_id: str) -> None: ...

    async def postprocess(
        self, token_ids: Sequence[int], state: PostprocessState, stops: Sequence[str], *, is_final: bool
    ) -> PostprocessResult: ...


@dataclass(slots=True)
class _Reply:
    """What this server has produced for one request so far.

    Usage counts what the client gets: `completion_tokens` is the token ids this server sent,
    `discarded_tokens` what its engine wrote beyond them (past a stop string, before our cancel
    landed). A resumed reply's replayed tokens are neither: the server before counted them.

    Log-probabilities, when asked (`num_logprobs` alternatives a token), go with their tokens
    in every response (cut with them at a stop string); the prompt's in the one response they
    arrived for."""

    text: list[str] = field(default_factory=list)  # unsent text (all of it when not streaming)
    token_ids: list[int] = field(default_factory=list)  # unsent new token ids
    last: RequestOutput | None = None
    sent_tokens: int = 0  # token ids sent in responses so far
    engine_tokens: int = 0  # tokens the engine generated for this request so far
    num_logprobs: int | None = None  # None: the request did not ask
    logprobs: TokenLogprobs | None = None  # of the unsent token ids
    prompt_logprobs: TokenLogprobs | None = None  # unsent

    def add(self, text: str, token_ids: Sequence[int], output: RequestOutput) -> None:
        """Queue `text` and the reply's `token_ids` of `output` (all of them but past a stop)."""
        self.text.append(text)
        self.token_ids.extend(token_ids)
        if output.logprobs is not None:
            kept = output.logprobs.slice(0, len(token_ids))
            self.logprobs = kept if self.logprobs is None else self.logprobs + kept
        if output.prompt_logprobs is not None:
            self.prompt_logprobs = output.prompt_logprobs
        self.engine_work(output)

    def engine_work(self, output: RequestOutput) -> None:
        """Count what the engine wrote, whether or not the reply keeps it."""
        self.engine_tokens = max(self.engine_tokens + len(output.new_token_ids), output.completion_tokens)
        self.last = output

    def take(self, finish_reason: str) -> Outputs:
        """The response tensors for everything unsent, and forget it."""
        last = self.last
        self.sent_tokens += len(self.token_ids)
        outputs = {
            TEXT_OUTPUT.name: TEXT_OUTPUT.array(["".join(self.text)]),
            OUTPUT_TOKEN_IDS.name: OUTPUT_TOKEN_IDS.array(self.token_ids),
            FINISH_REASON.name: FINISH_REASON.array([finish_reason]),
            PROMPT_TOKENS.name: PROMPT_TOKENS.array([last.prompt_tokens if last else 0]),
            CACHED_TOKENS.name: CACHED_TOKENS.array([last.cached_tokens if last else 0]),
            COMPLETION_TOKENS.name: COMPLETION_TOKENS.array([self.sent_tokens]),
            DISCARDED_TOKENS.name: DISCARDED_TOKENS.array([max(0, self.engine_tokens - self.sent_tokens)]),
        }
        if self.num_logprobs is not None:
            run = self.logprobs or TokenLogprobs((), (), (), self.num_logprobs)
            outputs.update(logprob_tensors(run, OUTPUT_LOGPROB_TENSORS))
        if self.prompt_logprobs is not None:
            outputs.update(logprob_tensors(self.prompt_logprobs, PROMPT_LOGPROB_TENSORS))
        self.text.clear()
        self.token_ids.clear()
        self.logprobs = self.prompt_logprobs = None
        return outputs


@dataclass(slots=True)
class _Marks:
    """Wall-clock stamps of one reply in `llm` (contracts/latency_log.py); a few per request."""

    received: float = field(default_factory=time.time)
    preprocessed: float | None = None
    first_engine_output: float | None = None
    first_sent: float | None = None  # the first response with tokens
    final_sent: float | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "received": self.received,
            "preprocessed": self.preprocessed,
            "first_engine_output": self.first_engine_output,
            "first_sent": self.first_sent,
            "final_sent": self.final_sent,
        }


class _FinalOnce:
    """Wraps a sink so that exactly one FINAL goes out, whatever path the reply takes."""

    def __init__(self, sink: ResponseSink) -> None:
        self._sink = sink
        self.final_sent = False
        self.marks = _Marks()

    def send(self, outputs: Outputs | None, *, final: bool, error: str | None = None) -> None:
        if self.final_sent:
            return
        self.final_sent = final
        self._sink.send(outputs, final=final, error=error)
        sent_ids = outputs.get(OUTPUT_TOKEN_IDS.name) if outputs is not None else None
        if self.marks.first_sent is None and sent_ids is not None and sent_ids.size:
            self.marks.first_sent = time.time()
        if final:
            self.marks.final_sent = time.time()

    def is_cancelled(self) -> bool:
        return not self.final_sent and self._sink.is_cancelled()


class LlmPipeline:
    """Runs `llm` requests over injected stages."""

    def __init__(
        self, stages: LlmStages, *, cancel_poll_s: float = 0.25, latency_log: LatencyLog | None = None
    ) -> None:
        self._stages = stages
        self._cancel_poll_s = cancel_poll_s
        self._latency_log = latency_log  # None: no per-request stamp lines (the default)

    async def run(self, request_id: str, src: TensorSource, sink: ResponseSink) -> None:
        """Serve one request; always ends with one FINAL response on `sink`."""
        out = _FinalOnce(sink)
        try:
            await self._serve(request_id, parse_llm_request(src), out)
        except InputError as exc:  # the caller's to fix: every server would refuse it
            out.send(None, final=True, error=invalid_input_message(str(exc)))
        except StageError as exc:
            out.send(None, final=True, error=str(exc))
        except Exception as exc:
            logger.exception("llm request %r failed", request_id)
            out.send(None, final=True, error=f"llm failed: {type(exc).__name__}: {exc}")
        finally:
            if not out.final_sent:  # cancelled task or a path that forgot: never leave it hanging
                out.send(None, final=True, error="llm ended without a reply")
            if self._latency_log is not None:
                self._latency_log.write("llm", request_id, out.marks.as_dict())

    async def _serve(self, request_id: str, request: LlmRequest, out: _FinalOnce) -> None:
        stages = self._stages
        if request.prompt_token_ids:
            pre = stages.preprocess_tokenized(request.prompt_token_ids, request.stops)
        else:
            pre = await stages.preprocess(request.prompt, request.stops)
        out.marks.preprocessed = time.time()
        engine_request = request.engine_request(request_id, pre.input_ids, pre.stop_sequences)
        token_ids = list(request.resume_token_ids)
        state = PostprocessState()
        reply = _Reply(num_logprobs=engine_request.sampling.logprobs)
        if token_ids:
            # A resumed reply: replay what the client already has, so the text it gets next
            # continues exactly where the previous server left off. The text itself is dropped.
            primed = await stages.postprocess(token_ids, state, request.stops, is_final=False)
            state = primed.state
            if primed.stop_hit:  # the client already has the whole reply
                out.send(reply.take(FinishReason.STOP.value), final=True)
                return
        client_cancelled = asyncio.Event()
        watcher = asyncio.create_task(self._watch_cancel(request_id, out, client_cancelled))
        finished = False
        try:
            async with contextlib.aclosing(stages.generate(engine_request)) as outputs:
                async for output in outputs:
                    if out.marks.first_engine_output is None:
                        out.marks.first_engine_output = time.time()
                    token_ids.extend(output.new_token_ids)
                    post = await stages.postprocess(token_ids, state, request.stops, is_final=output.finished)
                    state = post.state
                    finished = output.finished
                    if post.stop_hit:  # the client's reply ends now; the engine stops behind it
                        earlier = len(token_ids) - len(output.new_token_ids)
                        reply.add(post.text, output.new_token_ids[: max(0, post.reply_tokens - earlier)], output)
                        if not finished:
                            # Until the engine's last output, so its work past the stop is counted.
                            await stages.cancel(request_id)
                            async for rest in outputs:
                                reply.engine_work(rest)
                            finished = True
                        out.send(reply.take(FinishReason.STOP.value), final=True)
                        return
                    reply.add(post.text, output.new_token_ids, output)
                    if finished:
                        reason = output.finish_reason or FinishReason.ABORTED
                        if client_cancelled.is_set():
                            reason = FinishReason.CANCELLED
                        out.send(reply.take(reason.value), final=True)
                        return
                    if request.stream and not client_cancelled.is_set():
                        out.send(reply.take(""), final=False)
            out.send(reply.take(FinishReason.ABORTED.value), final=True)  # engine ended without FINAL
        except BaseException:
            if not finished:
                with contextlib.suppress(Exception):
                    await stages.cancel(request_id)
            raise
        finally:
            watcher.cancel()

    async def _watch_cancel(self, request_id: str, out: _FinalOnce, flag: asyncio.Event) -> None:
        """Poll the client's cancellation; pass it on to the engine as a control request."""
        while True:
            await asyncio.sleep(self._cancel_poll_s)
            if out.final_sent:  # the request is complete: never ask about it again
                return
            if out.is_cancelled():
                flag.set()
                try:
                    await self._stages.cancel(request_id)
                except Exception:
                    logger.exception("passing the client's cancel of %r to the engine failed", request_id)
                return
