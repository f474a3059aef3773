"""`GRPCInferenceService` in front of the gateway: Triton's RPCs over the same
`GenerationService` the HTTP routes call (admission and leases, idempotency by the request's
`id`, the request registry, prefix-aware routing and failover below it, metering with
`door="grpc"`).

    ModelInfer        key ──▶ slot ──▶ tensors ──▶ GenerationService.start ──▶ whole reply
    ModelStreamInfer  key once per call; each request on the stream is its own generation,
                      served in its own task, its responses interleaved on the one stream:

        requests ──▶ reader task ──▶ one task per request ──▶ queue ──▶ responses
        client cancels the call (or stop_stream(cancel_requests=True))
            ──▶ every task cancelled ──▶ the last reader of each generation gone: the
                registry cancels it, the engine frees its KV at its next step

A failure of one request on a stream is that request's `error_message` response (as Triton
sends it), or with the `triton_grpc_error: true` header the stream's status (Triton's
opt-in); ModelInfer and a refused key end the call with the status (status.py).

TensorRT-LLM's guided decoding and log-probability tensors (trtllm_tensors.py) become the
GenerationInput's grammar and `logprobs`, so they meet the rules, limits and failover of the
HTTP routes' `response_format` and `logprobs` in GenerationService.

A model the door does not serve (that name, or that version) is `ready: false` to ModelReady
and NOT_FOUND to the other model RPCs, as Triton answers both.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from contracts.errors import ApiError, model_not_found
from gateway.auth import bearer_key, resolve_principal
from gateway.deps import Services
from gateway.edge_keys import KeyCache
from gateway.grpc_door.models import model_config, model_metadata, server_metadata
from gateway.grpc_door.replies import door_generation_input, request_digest, responses, whole_response
from gateway.grpc_door.status import DoorStatus, door_status
from gateway.grpc_door.tensors import MODEL_VERSION, DoorRequest, parse_request, unknown_version
from gateway.key_slots import KeySlots, too_many
from quota.keys import hash_key
from serving.metrics import GatewayMetrics
from serving.principal import Principal, require_model_access
from serving.readers import reading
from serving.requests_registry import InflightRequest

TEAM_METADATA = "x-switchyard-team"  # the admin key acting for a team, as HTTP's X-Switchyard-Team
GRPC_ERROR_METADATA = "triton_grpc_error"  # "true": a stream's failure ends it with its status
_END = object()  # the reader's "no more responses" on a stream's queue


class _Caller:
    """Who calls (resolved once per call) and the key whose per-key caps each request counts on
    (None for the admin key, which has none)."""

    def __init__(self, principal: Principal, key_id: str | None) -> None:
        self.principal = principal
        self.key_id = key_id


class InferenceDoor(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """The servicer of one gateway process, over its lifespan's services."""

    def __init__(self, services: Services, keys: KeyCache, slots: KeySlots | None, metrics: GatewayMetrics) -> None:
        self._services = services
        self._keys = keys
        self._slots = slots
        self._metrics = metrics

    # -- health and metadata -------------------------------------------------------------------

    async def ServerLive(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        pools = await self._services.backend.readiness()
        return service_pb2.ServerReadyResponse(ready=bool(pools) and all(pool.ready for pool in pools))

    async def ServerMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return server_metadata()

    async def ModelReady(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """`ready: false` for a model the door does not serve, as Triton answers a probe (code
        that polls readiness must not crash); the key is still needed, and another team's model
        is still PERMISSION_DENIED."""
        name = await self._model_for_caller(request, context, probe=True)
        if name is None:
            return service_pb2.ModelReadyResponse(ready=False)
        pools = await self._services.backend.readiness()
        return service_pb2.ModelReadyResponse(ready=any(p.ready for p in pools if p.model_id == name))

    async def ModelMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return model_metadata(await self._served_model(request, context))

    async def ModelConfig(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return model_config(await self._served_model(request, context))

    # -- inference -----------------------------------------------------------------------------

    async def ModelInfer(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The whole reply in one response (whatever the `stream` input says)."""
        try:
            caller = await self._caller(context)
            with self._slot(caller, stream=False):
                parsed = parse_request(request)
                entry = await self._start(caller, parsed, stream=False)
                with reading(entry, self._services.registry):  # the call cancelled: so is the generation
                    await entry.wait_done()
                if entry.error is not None:
                    raise entry.error
                return whole_response(parsed, entry, final=None)
        except Exception as exc:  # every failure is a status
            await self._abort(context, self._failed(exc))

    async def ModelStreamInfer(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        """Decoupled streaming: responses of every request on the call, as they come."""
        try:
            caller = await self._caller(context)
        except Exception as exc:  # every refusal is a status
            await self._abort(context, self._failed(exc))
            return
        status_mode = _metadata(context).get(GRPC_ERROR_METADATA, "").lower() == "true"
        queue: asyncio.Queue[object] = asyncio.Queue()
        tasks: set[asyncio.Task[None]] = set()

        async def serve_one(request: Any) -> None:
            try:
                with self._slot(caller, stream=True):
                    parsed = parse_request(request)
                    entry = await self._start(caller, parsed, stream=parsed.stream)
                    async for response in responses(parsed, entry, self._services.registry):
                        queue.put_nowait(service_pb2.ModelStreamInferResponse(infer_response=response))
            except Exception as exc:  # that request's failure, not the stream's
                status = self._failed(exc)
                if status_mode:
                    queue.put_nowait(status)
                    return
                echo = service_pb2.ModelInferResponse(model_name=request.model_name, id=request.id)
                queue.put_nowait(
                    service_pb2.ModelStreamInferResponse(error_message=status.stream_message, infer_response=echo)
                )

        async def read_requests() -> None:
            try:
                async for request in request_iterator:
                    task = asyncio.create_task(serve_one(request))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                while tasks:  # the client is done sending: finish what it sent
                    await asyncio.gather(*tasks, return_exceptions=True)
            finally:
                queue.put_nowait(_END)

        reader = asyncio.create_task(read_requests())
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, DoorStatus):
                    await self._abort(context, item)
                yield item
        finally:
            for task in (reader, *tasks):
                task.cancel()

    # -- the shared path -----------------------------------------------------------------------

    async def _start(self, caller: _Caller, parsed: DoorRequest, *, stream: bool) -> InflightRequest:
        """`stream`: its responses go out as they come (ModelInfer's never do)."""
        inp = await door_generation_input(parsed, stream=stream)
        return await self._services.generation.start(caller.principal, inp, request_digest(parsed))

    async def _caller(self, context: grpc.aio.ServicerContext) -> _Caller:
        """The caller's key from `authorization: Bearer KEY` metadata (what tritonclient sends
        with `headers=`), resolved as HTTP resolves it, through the same key cache."""
        metadata = _metadata(context)
        key = bearer_key(metadata.get("authorization"))
        principal = await resolve_principal(self._keys, key, metadata.get(TEAM_METADATA))
        return _Caller(principal, None if principal.is_admin else hash_key(key))

    @contextlib.contextmanager
    def _slot(self, caller: _Caller, *, stream: bool) -> Iterator[None]:
        """One of the key's requests (and streams) in flight in this process, as HTTP counts them."""
        slots, team_id = self._slots, caller.principal.team_id
        if slots is None or caller.key_id is None or team_id is None:
            yield
            return
        slot = slots.acquire(caller.key_id, team_id)
        if slot is None:
            raise too_many("requests", slots.max_requests, slots.retry_after_s)
        try:
            if stream:
                slot.open_stream()  # the key's cap, its team's share of this worker's streams
            yield
        finally:
            slot.release()

    async def _model_for_caller(self, request: Any, context: grpc.aio.ServicerContext, *, probe: bool) -> str | None:
        """The model a model RPC names, when the door serves it (that name, that version) and
        the caller's team may use it (PERMISSION_DENIED otherwise). One the door does not serve
        is NOT_FOUND, or with `probe` (ModelReady) None."""
        try:
            caller = await self._caller(context)
            unserved = self._unserved(request.name, request.version)
            if unserved is not None:
                if probe:
                    return None
                raise unserved
            require_model_access(caller.principal, caller.principal.team, request.name)
        except Exception as exc:  # every refusal is a status
            await self._abort(context, self._failed(exc))
        return str(request.name)

    async def _served_model(self, request: Any, context: grpc.aio.ServicerContext) -> str:
        name = await self._model_for_caller(request, context, probe=False)
        assert name is not None  # not a probe: a model the door does not serve was NOT_FOUND
        return name

    def _unserved(self, name: str, version: str) -> ApiError | None:
        """Why the door does not serve model `name` at `version` ("": the latest); None when it does."""
        catalog = self._services.catalog
        if catalog.get(name) is None:
            return model_not_found(name, catalog.ids())
        if version not in ("", MODEL_VERSION):
            return unknown_version(name, version)
        return None

    def _failed(self, exc: BaseException) -> DoorStatus:
        status = door_status(exc)
        self._metrics.errors.labels(status=str(status.http_status), type=status.error_type).inc()
        return status

    async def _abort(self, context: grpc.aio.ServicerContext, status: DoorStatus) -> NoReturn:
        await context.abort(status.code, status.message, trailing_metadata=status.trailing_metadata)
        raise AssertionError("grpc.aio's abort raises")  # never reached: typed for mypy

    # -- the rest of Triton's protocol ---------------------------------------------------------

    async def ModelStatistics(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "ModelStatistics", "the gateway's /metrics has the fleet's figures")

    async def RepositoryIndex(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "RepositoryIndex", "GET /v1/models lists the models")

    async def RepositoryModelLoad(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "RepositoryModelLoad", "operators manage models with `switchyard`")

    async def RepositoryModelUnload(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "RepositoryModelUnload", "operators manage models with `switchyard`")

    async def SystemSharedMemoryStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "SystemSharedMemoryStatus", _NO_SHM)

    async def SystemSharedMemoryRegister(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "SystemSharedMemoryRegister", _NO_SHM)

    async def SystemSharedMemoryUnregister(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "SystemSharedMemoryUnregister", _NO_SHM)

    async def CudaSharedMemoryStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "CudaSharedMemoryStatus", _NO_SHM)

    async def CudaSharedMemoryRegister(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "CudaSharedMemoryRegister", _NO_SHM)

    async def CudaSharedMemoryUnregister(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "CudaSharedMemoryUnregister", _NO_SHM)

    async def TraceSetting(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "TraceSetting", "the model servers' tracing is internal")

    async def LogSettings(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _not_served(context, "LogSettings", "the model servers' logging is internal")


_NO_SHM = "the door is across a network from the model servers: send tensors in the request"


async def _not_served(context: grpc.aio.ServicerContext, rpc: str, why: str) -> None:
    await context.abort(
        grpc.StatusCode.UNIMPLEMENTED,
        f"{rpc} is not served by Switchyard's gRPC door ({why}); it serves ServerLive, ServerReady, "
        "ServerMetadata, ModelReady, ModelMetadata, ModelConfig, ModelInfer and ModelStreamInfer",
    )


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    """The call's metadata by lower-case key (the last of a repeated one); binary ones skipped."""
    pairs = context.invocation_metadata() or ()
    return {str(key).lower(): value for key, value in pairs if isinstance(value, str)}
