"""`GenerationBackend` over Triton's gRPC streaming API: one client per server, model `llm`.

`FailoverBackend` (router/failover_backend.py) chooses the server and streams through `stream_on()`.

Each request opens its own `ModelStreamInfer` stream carrying exactly one inference request
(Triton request id = our request id) and reads the decoupled responses until the one with a
`finish_reason`. Cancelling the gRPC call (task cancellation, `aclose()` or `cancel()`) makes
Triton report `is_cancelled()` to the model, which stops the engine at its next step and frees
the KV blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

import grpc
import numpy as np
from tritonclient.grpc import InferInput, InferResult
from tritonclient.utils import InferenceServerException

from contracts.generation import (
    BackendError,
    BackendUnavailable,
    GenerationDelta,
    GenerationRequest,
    PoolReadiness,
    RequestRejected,
)
from contracts.llm_tensors import (
    CACHE_NAMESPACE,
    GUIDED_GRAMMAR,
    IGNORE_EOS,
    INPUT_IDS,
    LOGPROBS,
    MAX_TOKENS,
    PROMPT_LOGPROBS,
    REQUEST_CLASS,
    RESUME_TOKEN_IDS,
    SEED,
    SLO_TTFT_MS,
    STOP,
    STREAM,
    TEMPERATURE,
    TEXT_INPUT,
    TOP_K,
    TOP_P,
    LlmInput,
    refused_input,
)
from router.llm_response import parse_response

LLM_MODEL = "llm"

_UNAVAILABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class ResponseStream(Protocol):
    """What `InferenceServerClient.stream_infer` returns: (result, error) pairs, cancellable."""

    def __aiter__(self) -> ResponseStream: ...

    async def __anext__(self) -> tuple[InferResult | None, InferenceServerException | None]: ...

    def cancel(self) -> bool: ...


class TritonBackend:
    """One `tritonclient.grpc.aio` client per server ("target": a registered server's id)."""

    def __init__(
        self,
        clients: Mapping[str, Any],
        pool_models: Mapping[str, str],
        retry_after_s: int = 5,
        ready_timeout_s: float = 2.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._headers = dict(headers or {})  # sent with every inference call (Triton's key)
        self._clients = dict(clients)  # target -> InferenceServerClient (or a test double)
        self._pool_models = dict(pool_models)  # target -> model_id
        self._retry_after_s = retry_after_s
        self._ready_timeout_s = ready_timeout_s
        self._streams: dict[str, ResponseStream] = {}
        self._cancelled: set[str] = set()

    def add_target(self, target: str, client: Any, model_id: str) -> None:
        """A server to stream from (`stream_on(target, ...)`)."""
        self._clients[target] = client
        self._pool_models[target] = model_id

    def detach_target(self, target: str) -> Any | None:
        """Forget a server (it left the fleet) and hand back its client for the caller to
        close; its open streams end on their own."""
        self._pool_models.pop(target, None)
        return self._clients.pop(target, None)

    async def stream_on(self, server_id: str, request: GenerationRequest) -> AsyncGenerator[GenerationDelta, None]:
        """Stream `request` from the server `server_id` (a target); raises BackendUnavailable / BackendError when it
        fails, RequestRejected when the request's input cannot be sent or the server refuses it."""
        try:
            inputs = build_inputs(request)
        except ValueError as exc:  # a value its tensor cannot hold: no server could take it
            raise RequestRejected(str(exc)) from None

        async def one_request() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": LLM_MODEL, "inputs": inputs, "request_id": request.request_id}

        stream: ResponseStream = self._clients[server_id].stream_infer(one_request(), headers=self._headers)
        self._streams[request.request_id] = stream
        finished = False
        try:
            async for result, error in stream:
                if error is not None:
                    raise _stream_error(server_id, error.message())
                if result is None:
                    continue
                try:
                    delta = parse_response(result.get_response())
                except ValueError as exc:  # contents no `llm` sends
                    raise BackendError(f"server {server_id!r}: {exc}") from exc
                finished = delta.finish_reason is not None
                yield delta
                if finished:
                    return
            raise BackendError(f"server {server_id!r}: stream ended without a finish reason")
        except asyncio.CancelledError:
            if request.request_id not in self._cancelled:
                current = asyncio.current_task()
                if current is not None and current.cancelling() == 0:
                    # Not our cancellation: grpc ends a call whose channel closed under it the same
                    # way, and the channel closes when its server leaves the fleet (marked dead:
                    # `detach_target`). A dead server's reply fails over; before, it ended as if
                    # the client had cancelled it (the chaos run's kill-engine-stub fault).
                    message = f"server {server_id!r}: its connection closed mid-reply (it left the fleet)"
                    raise BackendUnavailable(message, retry_after_s=self._retry_after_s) from None
                raise  # our reader was cancelled: the finally below cancels the call
            finished = True  # cancel(): grpc surfaced the local cancellation as CancelledError
            yield GenerationDelta(finish_reason="cancelled")
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:  # a stream in triton_grpc_error mode
                raise RequestRejected(refused_input(exc.details() or "") or exc.details() or "") from exc
            message = f"server {server_id!r}: {exc.code().name}: {exc.details()}"
            if exc.code() in _UNAVAILABLE_CODES:
                raise BackendUnavailable(message, retry_after_s=self._retry_after_s) from exc
            raise BackendError(message) from exc
        finally:
            self._streams.pop(request.request_id, None)
            self._cancelled.discard(request.request_id)
            if not finished:
                stream.cancel()

    async def cancel(self, request_id: str) -> bool:
        stream = self._streams.get(request_id)
        if stream is None:
            return False
        self._cancelled.add(request_id)
        stream.cancel()
        return True

    async def readiness(self) -> list[PoolReadiness]:
        return list(await asyncio.gather(*(self._pool_readiness(pid) for pid in self._clients)))

    async def _pool_readiness(self, pool_id: str) -> PoolReadiness:
        client = self._clients[pool_id]
        model_id = self._pool_models[pool_id]
        timeout = self._ready_timeout_s
        try:
            # Triton's default --strict-readiness makes server readiness cover every model.
            if not await client.is_server_ready(client_timeout=timeout):
                return PoolReadiness(pool_id, model_id, False, "server not ready")
            if not await client.is_model_ready(LLM_MODEL, client_timeout=timeout):
                return PoolReadiness(pool_id, model_id, False, f"model {LLM_MODEL!r} not loaded")
        except InferenceServerException as exc:
            return PoolReadiness(pool_id, model_id, False, str(exc.message()))
        return PoolReadiness(pool_id, model_id, True)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()


def _stream_error(server_id: str, message: str) -> BackendError:
    """An error response of `llm`: the caller's when it refused the input, else the server's."""
    detail = refused_input(message)
    if detail is not None:
        return RequestRejected(detail)
    return BackendError(f"server {server_id!r}: {message}")


def build_inputs(request: GenerationRequest) -> list[InferInput]:
    """The `llm` input tensors (contracts/llm_tensors.py); optional ones only when they differ
    from the model's default, so the model's defaults stay the single source of truth. The
    prompt goes as the token ids the gateway encoded when it has them (the server then skips
    its `preprocessing`), else as text."""
    prompt = (
        _array_tensor(INPUT_IDS, request.prompt_token_ids.array())
        if request.prompt_token_ids
        else _tensor(TEXT_INPUT, [request.prompt])
    )
    inputs = [
        prompt,
        _tensor(MAX_TOKENS, [request.max_tokens]),
        _tensor(STREAM, [True]),
        _tensor(REQUEST_CLASS, [request.request_class]),
    ]
    if request.stop:
        inputs.append(_tensor(STOP, request.stop))
    if request.temperature is not None:
        inputs.append(_tensor(TEMPERATURE, [request.temperature]))
    if request.top_p is not None:
        inputs.append(_tensor(TOP_P, [request.top_p]))
    if request.top_k is not None:
        inputs.append(_tensor(TOP_K, [request.top_k]))
    if request.seed is not None:
        inputs.append(_tensor(SEED, [request.seed]))
    if request.ignore_eos:
        inputs.append(_tensor(IGNORE_EOS, [True]))
    if request.resume_token_ids:
        inputs.append(_tensor(RESUME_TOKEN_IDS, request.resume_token_ids))
    if request.cache_namespace:
        inputs.append(_tensor(CACHE_NAMESPACE, [request.cache_namespace]))
    if request.guided_grammar is not None:
        inputs.append(_tensor(GUIDED_GRAMMAR, [request.guided_grammar]))
    if request.logprobs is not None:
        inputs.append(_tensor(LOGPROBS, [request.logprobs]))
    if request.prompt_logprobs is not None:
        inputs.append(_tensor(PROMPT_LOGPROBS, [request.prompt_logprobs]))
    if request.slo_ttft_ms is not None:
        inputs.append(_tensor(SLO_TTFT_MS, [request.slo_ttft_ms]))
    return inputs


def _tensor(spec: LlmInput, values: Sequence[str | int | float | bool]) -> InferInput:
    return _array_tensor(spec, spec.array(values))


def _array_tensor(spec: LlmInput, data: np.ndarray[Any, Any]) -> InferInput:
    """`data`, already of `spec`'s dtype, as its tensor."""
    tensor = InferInput(spec.name, list(data.shape), spec.datatype)
    tensor.set_data_from_numpy(data)
    return tensor
