"""The `llm` BLS orchestration: one reply from prompt text to streamed text deltas.

    parse inputs ─▶ preprocessing ─▶ engine (decoupled stream) ─┬─▶ postprocessing ─▶ client
                                        ▲                        │    per engine response
                                        └── cancel_request_id ◀──┴── stop string hit, or the
                                                                     client cancelled

Each engine response (the engine merges steps when we read slowly) goes through one
postprocessing call, whose state (detokenizer offsets, held-back text) this loop carries. With
`stream=false` the deltas are accumulated into one response. Every path ends in exactly one
FINAL response; an error is a Triton error on that final response.

The BLS calls are injected (`LlmStages`), so the whole flow is tested without Triton;
`bls/triton_stages.py` implements them with `pb_utils`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bls.llm_request import LlmRequest, parse_llm_request
from bls.postprocessing import PostprocessResult, PostprocessState
from bls.preprocessing import Preprocessed
from bls.tensors import (
    InputError,
    Outputs,
    ResponseSink,
    TensorSource,
    int32_scalar,
    int32_tensor,
    text_tensor,
)
from engine.request import EngineRequest, FinishReason, RequestOutput

logger = logging.getLogger(__name__)


class StageError(RuntimeError):
    """A stage model answered with an error; the message starts with the model's name."""


class LlmStages(Protocol):
    """The three models `llm` calls (BLS in production, fakes in tests)."""

    async def preprocess(self, prompt: str, stops: Sequence[str]) -> Preprocessed: ...

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
    """What this server has produced for one request so far."""

    text: list[str] = field(default_factory=list)  # unsent text (all of it when not streaming)
    token_ids: list[int] = field(default_factory=list)  # unsent new token ids
    last: RequestOutput | None = None

    def add(self, text: str, output: RequestOutput) -> None:
        self.text.append(text)
        self.token_ids.extend(output.new_token_ids)
        self.last = output

    def take(self, finish_reason: str) -> Outputs:
        """The response tensors for everything unsent, and forget it."""
        last = self.last
        outputs = {
            "text_output": text_tensor("".join(self.text)),
            "output_token_ids": int32_tensor(self.token_ids),
            "finish_reason": text_tensor(finish_reason),
            "prompt_tokens": int32_scalar(last.prompt_tokens if last else 0),
            "cached_tokens": int32_scalar(last.cached_tokens if last else 0),
            "completion_tokens": int32_scalar(last.completion_tokens if last else 0),
        }
        self.text.clear()
        self.token_ids.clear()
        return outputs


class _FinalOnce:
    """Wraps a sink so that exactly one FINAL goes out, whatever path the reply takes."""

    def __init__(self, sink: ResponseSink) -> None:
        self._sink = sink
        self.final_sent = False

    def send(self, outputs: Outputs | None, *, final: bool, error: str | None = None) -> None:
        if self.final_sent:
            return
        self.final_sent = final
        self._sink.send(outputs, final=final, error=error)

    def is_cancelled(self) -> bool:
        return not self.final_sent and self._sink.is_cancelled()


class LlmPipeline:
    """Runs `llm` requests over injected stages."""

    def __init__(self, stages: LlmStages, *, cancel_poll_s: float = 0.25) -> None:
        self._stages = stages
        self._cancel_poll_s = cancel_poll_s

    async def run(self, request_id: str, src: TensorSource, sink: ResponseSink) -> None:
        """Serve one request; always ends with one FINAL response on `sink`."""
        out = _FinalOnce(sink)
        try:
            await self._serve(request_id, parse_llm_request(src), out)
        except (InputError, StageError) as exc:
            out.send(None, final=True, error=str(exc))
        except Exception as exc:
            logger.exception("llm request %r failed", request_id)
            out.send(None, final=True, error=f"llm failed: {type(exc).__name__}: {exc}")
        finally:
            if not out.final_sent:  # cancelled task or a path that forgot: never leave it hanging
                out.send(None, final=True, error="llm ended without a reply")

    async def _serve(self, request_id: str, request: LlmRequest, out: _FinalOnce) -> None:
        stages = self._stages
        pre = await stages.preprocess(request.prompt, request.stops)
        engine_request = request.engine_request(request_id, pre.input_ids, pre.stop_sequences)
        token_ids = list(request.resume_token_ids)
        state = PostprocessState()
        reply = _Reply()
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
                    token_ids.extend(output.new_token_ids)
                    post = await stages.postprocess(token_ids, state, request.stops, is_final=output.finished)
                    state = post.state
                    reply.add(post.text, output)
                    finished = output.finished
                    if post.stop_hit:  # the client's reply ends now; the engine stops behind it
                        out.send(reply.take(FinishReason.STOP.value), final=True)
                        if not finished:
                            await stages.cancel(request_id)
                        return
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
