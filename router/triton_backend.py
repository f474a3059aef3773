"""`GenerationBackend` over Triton's gRPC streaming API: one client per server, model `llm`.

`FleetBackend` (router/fleet_backend.py) chooses the server and streams through `stream_on()`.

Each request opens its own `ModelStreamInfer` stream carrying exactly one inference request
(Triton request id = our request id) and reads the decoupled responses until the one with a
`finish_reason`. Cancelling the gRPC call (task cancellation, `aclose()` or `cancel()`) makes
Triton report `is_cancelled()` to the model, which stops the engine at its next step and frees
the KV blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
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
    Usage,
)

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
    ) -> None:
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

    def has_target(self, target: str) -> bool:
        return target in self._clients

    async def stream_on(self, pool_id: str, request: GenerationRequest) -> AsyncGenerator[GenerationDelta, None]:
        """Stream `request` from one target; raises BackendUnavailable / BackendError when it fails."""
        inputs = build_inputs(request)

        async def one_request() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": LLM_MODEL, "inputs": inputs, "request_id": request.request_id}

        stream: ResponseStream = self._clients[pool_id].stream_infer(one_request())
        self._streams[request.request_id] = stream
        finished = False
        try:
            async for result, error in stream:
                if error is not None:
                    raise BackendError(f"pool {pool_id!r}: {error.message()}")
                if result is None:
                    continue
                delta = parse_response(result)
                finished = delta.finish_reason is not None
                yield delta
                if finished:
                    return
            raise BackendError(f"pool {pool_id!r}: stream ended without a finish reason")
        except asyncio.CancelledError:
            if request.request_id not in self._cancelled:
                raise  # our reader was cancelled: the finally below cancels the call
            finished = True  # cancel(): grpc surfaced the local cancellation as CancelledError
            yield GenerationDelta(finish_reason="cancelled")
        except grpc.aio.AioRpcError as exc:
            message = f"pool {pool_id!r}: {exc.code().name}: {exc.details()}"
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


def build_inputs(request: GenerationRequest) -> list[InferInput]:
    """The `llm` input tensors of docs/tensors.md; optional ones only when they differ from
    the model's default, so the model's defaults stay the single source of truth."""
    inputs = [
        _tensor("text_input", np.array([request.prompt.encode()], dtype=np.object_), "BYTES"),
        _tensor("max_tokens", np.array([request.max_tokens], dtype=np.int32), "INT32"),
        _tensor("stream", np.array([True], dtype=np.bool_), "BOOL"),
        _tensor("request_class", np.array([request.request_class.encode()], dtype=np.object_), "BYTES"),
    ]
    if request.stop:
        stop = np.array([s.encode() for s in request.stop], dtype=np.object_)
        inputs.append(_tensor("stop", stop, "BYTES"))
    if request.temperature is not None:
        inputs.append(_tensor("temperature", np.array([request.temperature], dtype=np.float32), "FP32"))
    if request.top_p is not None:
        inputs.append(_tensor("top_p", np.array([request.top_p], dtype=np.float32), "FP32"))
    if request.top_k is not None:
        inputs.append(_tensor("top_k", np.array([request.top_k], dtype=np.int32), "INT32"))
    if request.seed is not None:
        inputs.append(_tensor("seed", np.array([request.seed], dtype=np.int64), "INT64"))
    if request.ignore_eos:
        inputs.append(_tensor("ignore_eos", np.array([True], dtype=np.bool_), "BOOL"))
    if request.resume_token_ids:
        resume = np.array(request.resume_token_ids, dtype=np.int32)
        inputs.append(_tensor("resume_token_ids", resume, "INT32"))
    if request.cache_namespace:
        namespace = np.array([request.cache_namespace.encode()], dtype=np.object_)
        inputs.append(_tensor("cache_namespace", namespace, "BYTES"))
    return inputs


def parse_response(result: InferResult) -> GenerationDelta:
    """One `llm` response as a delta. Missing outputs read as empty (the model may leave out
    what did not change)."""
    text = _first_bytes(result.as_numpy("text_output")).decode("utf-8", errors="replace")
    token_ids = _int_tuple(result.as_numpy("output_token_ids"))
    finish = _first_bytes(result.as_numpy("finish_reason")).decode() or None
    prompt = _first_int(result.as_numpy("prompt_tokens"))
    usage = None
    if prompt is not None:
        usage = Usage(
            prompt_tokens=prompt,
            cached_tokens=_first_int(result.as_numpy("cached_tokens")) or 0,
            completion_tokens=_first_int(result.as_numpy("completion_tokens")) or 0,
        )
    return GenerationDelta(text=text, token_ids=token_ids, finish_reason=finish, usage=usage)


def _tensor(name: str, data: np.ndarray[Any, Any], datatype: str) -> InferInput:
    tensor = InferInput(name, list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    return tensor


def _first_bytes(array: np.ndarray[Any, Any] | None) -> bytes:
    if array is None or array.size == 0:
        return b""
    value = array.reshape(-1)[0]
    return value if isinstance(value, bytes) else str(value).encode()


def _first_int(array: np.ndarray[Any, Any] | None) -> int | None:
    if array is None or array.size == 0:
        return None
    return int(array.reshape(-1)[0])


def _int_tuple(array: np.ndarray[Any, Any] | None) -> tuple[int, ...]:
    if array is None:
        return ()
    return tuple(int(x) for x in array.reshape(-1))
