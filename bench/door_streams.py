"""Many open `ModelStreamInfer` calls through the gateway's gRPC door from one client process.

Unmodified `tritonclient.grpc.aio`, as a user's program would run it (docs/grpc.md): each
stream is one call carrying one request of `max_tokens` tokens, open once its first response
is in, then read until the process is told to close (the call is cancelled, which the door
sees as a client that left). Every call of the process runs on ONE event loop: grpc.aio binds
a loop to its process-wide completion queue, and calls on loops of their own in threads lose
events (tests/integration/test_grpc_door_e2e.py). The calls are spread over `channels`
channels, each with a subchannel pool of its own so each is its own TCP connection (grpc
would otherwise share one connection between channels of the same target), so the kernel
spreads them over the gateway's workers (the door's port is SO_REUSEPORT).

    DoorSpec ─▶ run_door_load (a process) ─▶ ("opened", LoadReport) ... close ... ("closed", LoadReport)
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from bench.sse_streams import CLIENT_NICENESS, LoadTally
from config.process_limits import raise_open_files_limit


@dataclass(frozen=True, slots=True)
class DoorSpec:
    """One client process's gRPC streams: `streams` calls over `channels` connections to the
    door at `url` (host:port), at most `open_concurrency` being opened at once, every one open
    within `open_deadline_s`."""

    url: str
    api_key: str
    model: str
    streams: int
    channels: int
    max_tokens: int
    open_concurrency: int
    open_deadline_s: float


def _inputs(model: str, max_tokens: int) -> dict[str, Any]:
    import numpy as np
    import tritonclient.grpc.aio as triton

    text = triton.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"the quick brown fox"], dtype=np.object_))
    tokens = triton.InferInput("max_tokens", [1], "INT32")
    tokens.set_data_from_numpy(np.array([max_tokens], dtype=np.int32))
    return {"model_name": model, "inputs": [text, tokens]}


def _error_kind(error: Exception) -> str:
    """`grpc <STATUS>` for a failed call or a request's error response (`"RESOURCE_EXHAUSTED: ..."`)."""
    code = getattr(error, "code", None)
    if callable(code):
        return f"grpc {getattr(code(), 'name', code())}"
    head = str(error).split(":", 1)[0].strip()
    return f"grpc {head}" if head.isupper() else type(error).__name__


def _is_final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


async def _one(client: Any, spec: DoorSpec, gate: asyncio.Semaphore, deadline: float, tally: LoadTally) -> None:
    import grpc

    request = _inputs(spec.model, spec.max_tokens)

    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield request

    call = client.stream_infer(requests(), headers={"authorization": f"Bearer {spec.api_key}"})
    try:
        try:
            async with gate:
                result, error = await asyncio.wait_for(call.__anext__(), deadline - time.monotonic())
        finally:
            tally.settled += 1
        if error is not None:
            tally.errors[_error_kind(error)] += 1
            return
        tally.opened += 1
        tally.events += 1
        async for result, error in call:
            if error is not None:
                tally.errors[_error_kind(error)] += 1
                return
            tally.events += 1
            if _is_final(result):
                break
        if not tally.closing:
            tally.errors["ended early"] += 1
    except TimeoutError:
        tally.errors["open timeout"] += 1
    except StopAsyncIteration:  # the call ended before its first response
        tally.errors["ended early"] += 1
    except grpc.aio.AioRpcError as exc:
        if tally.closing:
            return
        # A call cancelled by wait_for at the deadline ends as CANCELLED rather than TimeoutError.
        late = exc.code() == grpc.StatusCode.CANCELLED and time.monotonic() >= deadline
        tally.errors["open timeout" if late else _error_kind(exc)] += 1
    finally:
        call.cancel()


async def _load(spec: DoorSpec, reports: Any, index: int, close: Any) -> None:
    import tritonclient.grpc.aio as triton

    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    clients = [triton.InferenceServerClient(spec.url, channel_args=options) for _ in range(spec.channels)]
    tally = LoadTally()
    gate = asyncio.Semaphore(spec.open_concurrency)
    started = time.monotonic()
    deadline = started + spec.open_deadline_s
    tasks = [
        asyncio.create_task(_one(clients[i % spec.channels], spec, gate, deadline, tally)) for i in range(spec.streams)
    ]
    while tally.settled < spec.streams and time.monotonic() < deadline + 1:
        await asyncio.sleep(0.05)
    reports.put(("opened", index, tally.report(time.monotonic() - started)))
    while not close.is_set():
        await asyncio.sleep(0.1)
    tally.closing = True
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for client in clients:
        await client.close()
    reports.put(("closed", index, tally.report(time.monotonic() - started)))


def run_door_load(spec: DoorSpec, reports: Any, index: int, close: Any) -> None:
    """A client process of gRPC streams, with `sse_streams.run_load`'s protocol on `reports`."""
    raise_open_files_limit()
    os.nice(CLIENT_NICENESS)  # the gateway's workers come first on the shared cores
    asyncio.run(_load(spec, reports, index, close))
