"""`LlmStages` over Triton BLS calls: what the `llm` model runs in production (the engine
itself in this process when `llm` hosts it: bls/in_process_engine.py).

Every BLS call runs as a blocking `exec()` on our own thread pool, never as `async_exec()`.
The stub implements `async_exec` as `run_in_executor(None, exec)`, i.e. on the event loop's
default pool of a handful of threads, and a decoupled `exec` blocks until the engine's
*first* response: a few requests queued in the engine then held every default thread, and
all other BLS calls of the instance (postprocessing, even the cancels that would have freed
the engine) queued behind them. Seen: 40 streams cancelled early, 22 engine requests left
running for good. The same holds for the iterator: `next()` blocks until the next response
(GIL released), so it too runs on the pool. The pool holds a thread for every reply in
flight, hence its size (threads start lazily).

The stub's response iterator has no `cancel()`, and dropping an unfinished one blocks until
the engine finishes it. So stopping early means: send the dialect's cancel control request,
then drain the iterator on a worker thread.

The engine's tensors are the dialect's business (bls/engine_dialect.py): `switchyard` for
cpu_engine and tensorrt_llm, `tensorrtllm_cpp` for TensorRT-LLM's C++ backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncGenerator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bls.engine_dialect import EngineDialect, EngineResponseParser, SwitchyardDialect
from bls.in_process_engine import InProcessEngine
from bls.llm_engine_gauges import EngineRequestObserver
from bls.llm_pipeline import StageError
from bls.postprocessing import (
    Postprocessor,
    PostprocessResult,
    PostprocessState,
    parse_postprocess_outputs,
    postprocess_inputs,
)
from bls.preprocessing import Preprocessed, Preprocessor, parse_preprocess_outputs, preprocess_inputs
from bls.tensors import InputError, Outputs
from bls.triton_bindings import PbTensorSource, pb_tensors
from contracts.llm_tensors import refused_input
from engine.request import EngineRequest, RequestOutput

PREPROCESS_OUTPUTS = ["input_ids", "stop_token_sequences", "stop_token_offsets"]
POSTPROCESS_OUTPUTS = ["text_output", "prefix_offset", "read_offset", "held_text", "stop_hit", "reply_tokens"]


def _stage_error(model: str, message: str) -> Exception:
    """A stage's error: InputError when it refused the request's input (the caller's to fix),
    StageError when it failed."""
    detail = refused_input(message)
    if detail is not None:
        return InputError(f"{model}: {detail}")
    return StageError(f"{model}: {message}")


def _next_or_none(iterator: Any) -> Any:
    return next(iterator, None)


def _drain(iterator: Any) -> None:
    for _ in iterator:
        pass


class TritonStages:
    """Calls `preprocessing`, the engine model and `postprocessing` through BLS."""

    def __init__(
        self,
        pb_utils: Any,
        engine_model: str,
        executor: ThreadPoolExecutor,
        *,
        preprocessing_model: str = "preprocessing",
        postprocessing_model: str = "postprocessing",
        postprocessor: Postprocessor | None = None,
        preprocessor: Preprocessor | None = None,
        dialect: EngineDialect | None = None,
        observer: EngineRequestObserver | None = None,
        engine: InProcessEngine | None = None,
    ) -> None:
        """With `postprocessor`, detokenization runs in this process instead of a BLS call to
        the postprocessing model: same code, one Triton round trip less per response.
        `preprocessor` takes prompts that arrive as token ids (without one they are refused).
        `dialect` is the engine model's contract (default: switchyard); `observer` hears of
        every engine request's start and of its end (the engine's FINAL). With `engine`, the
        engine runs in this process (bls/in_process_engine.py) and no BLS call reaches it."""
        self._pb = pb_utils
        self._engine_model = engine_model
        self._executor = executor
        self._preprocessing_model = preprocessing_model
        self._postprocessing_model = postprocessing_model
        self._postprocessor = postprocessor
        self._preprocessor = preprocessor
        self._dialect: EngineDialect = dialect if dialect is not None else SwitchyardDialect()
        self._observer = observer
        self._engine = engine
        # The parser of every request in flight, so a cancel can tell it (all on the event loop).
        self._parsers: dict[str, EngineResponseParser] = {}

    def _request(self, model: str, inputs: Outputs, outputs: Sequence[str], request_id: str = "") -> Any:
        return self._pb.InferenceRequest(
            model_name=model,
            inputs=pb_tensors(self._pb, inputs),
            requested_output_names=list(outputs),
            request_id=request_id,
        )

    async def _exec(self, infer: Any, *, decoupled: bool) -> Any:
        """`infer.exec()` on our pool (see the module docstring for why not `async_exec`)."""
        call = functools.partial(infer.exec, decoupled=decoupled)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def _call(self, model: str, inputs: Outputs, outputs: Sequence[str]) -> PbTensorSource:
        response = await self._exec(self._request(model, inputs, outputs), decoupled=False)
        if response.has_error():
            raise _stage_error(model, response.error().message())
        return PbTensorSource.of_response(self._pb, response)

    async def preprocess(self, prompt: str, stops: Sequence[str]) -> Preprocessed:
        src = await self._call(self._preprocessing_model, preprocess_inputs(prompt, stops), PREPROCESS_OUTPUTS)
        return parse_preprocess_outputs(src)

    def preprocess_tokenized(self, input_ids: tuple[int, ...], stops: Sequence[str]) -> Preprocessed:
        if self._preprocessor is None:
            raise InputError("this llm has no tokenizer to check input_ids against: send the prompt as text_input")
        return self._preprocessor.run_tokenized(input_ids, stops)

    async def postprocess(
        self, token_ids: Sequence[int], state: PostprocessState, stops: Sequence[str], *, is_final: bool
    ) -> PostprocessResult:
        if self._postprocessor is not None:
            return self._postprocessor.step(token_ids, state, stops, is_final=is_final)
        inputs = postprocess_inputs(token_ids, state, stops, is_final=is_final)
        src = await self._call(self._postprocessing_model, inputs, POSTPROCESS_OUTPUTS)
        return parse_postprocess_outputs(src)

    async def generate(self, request: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        if self._engine is not None:
            async with contextlib.aclosing(self._engine.generate(request)) as outputs:
                async for output in outputs:
                    yield output
            return
        dialect = self._dialect
        infer = self._request(
            self._engine_model, dialect.request_tensors(request), dialect.output_names, request.request_id
        )
        parser = dialect.response_parser(request)
        self._parsers[request.request_id] = parser
        if self._observer is not None:
            self._observer.started(request)
        try:
            async with contextlib.aclosing(self._stream(infer, parser)) as outputs:
                async for output in outputs:
                    yield output
        finally:
            if self._parsers.get(request.request_id) is parser:
                del self._parsers[request.request_id]
            if self._observer is not None:
                self._observer.finished(request)

    async def _stream(self, infer: Any, parser: EngineResponseParser) -> AsyncGenerator[RequestOutput, None]:
        """The engine's responses as outputs, then the parser's last word once the stream ends."""
        iterator = await self._exec(infer, decoupled=True)
        loop = asyncio.get_running_loop()
        exhausted = False
        try:
            while True:
                response = await loop.run_in_executor(self._executor, _next_or_none, iterator)
                if response is None:
                    exhausted = True
                    break
                if response.has_error():
                    raise _stage_error(self._engine_model, response.error().message())
                if not response.output_tensors():
                    continue  # a bare FINAL
                try:
                    output = parser.parse(PbTensorSource.of_response(self._pb, response))
                except InputError as exc:
                    raise StageError(f"{self._engine_model} answered with bad tensors: {exc}") from None
                yield output
        finally:
            if not exhausted:
                await loop.run_in_executor(self._executor, _drain, iterator)
        last = parser.finish()
        if last is not None:
            yield last

    async def cancel(self, request_id: str) -> None:
        if self._engine is not None:
            await self._engine.cancel(request_id)
            return
        parser = self._parsers.get(request_id)
        if parser is not None:
            parser.cancel_requested()
        control = self._dialect.cancel_request(request_id)
        infer = self._request(self._engine_model, control.inputs, control.output_names, control.request_id)
        iterator = await self._exec(infer, decoupled=True)
        await asyncio.get_running_loop().run_in_executor(self._executor, _drain, iterator)
