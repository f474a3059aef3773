"""The part of TensorRT-LLM's LLM API (`tensorrt_llm.LLM`, 1.x) that Switchyard uses, as types.

    llm.generate_async(prompt_token_ids, sampling_params, streaming=True, ...)
        -> RequestOutput: `async for` yields it again after every step; `.outputs[0].token_ids`
           is the whole completion so far, `.finished` and `.outputs[0].finish_reason` tell the
           end; `.abort()` cancels it.
    llm.get_stats_async(timeout)
        -> async iterator of per-iteration runtime stats (JSON text or dicts; `kvCacheStats`,
           `inflightBatchingStats`, `numActiveRequests`, ...), produced only while the LLM was
           made with `enable_iter_perf_stats=True`.

Protocols rather than imports, so the adapter (`trtllm.engine_loop`) is typed and unit-tested
on machines without TensorRT-LLM; only the Triton shell imports the real package.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol


class CompletionLike(Protocol):
    """`tensorrt_llm.executor.result.CompletionOutput`: one beam of a request's output."""

    @property
    def token_ids(self) -> Sequence[int]: ...  # every completion token so far

    @property
    def finish_reason(self) -> str | None: ...  # "stop", "length", "cancelled" or None


class GenerationLike(Protocol):
    """`tensorrt_llm.executor.result.RequestOutput` (a `GenerationResult`) of a streamed request."""

    @property
    def finished(self) -> bool: ...

    @property
    def outputs(self) -> Sequence[CompletionLike]: ...

    def abort(self) -> None: ...

    def __aiter__(self) -> AsyncIterator[GenerationLike]: ...


class LlmLike(Protocol):
    """`tensorrt_llm.LLM`, as far as the engine loop uses it."""

    def generate_async(
        self, inputs: list[int], sampling_params: Any = ..., *, streaming: bool = ..., **kwargs: Any
    ) -> GenerationLike: ...

    def get_stats_async(self, timeout: float = ...) -> AsyncIterator[str | Mapping[str, Any]]: ...

    def shutdown(self) -> None: ...


# `tensorrt_llm.SamplingParams`: called with keyword arguments, its result passed on untouched.
SamplingParamsFactory = Callable[..., Any]
