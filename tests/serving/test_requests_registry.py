"""RequestRegistry on its own (FakeBackend, no app): shutdown ends every generation, and waits
for what each one does at its end."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from contracts.generation import GenerationDelta, GenerationRequest
from serving.metrics import GatewayMetrics
from serving.requests_registry import InflightRequest, RequestRegistry


class CancelSwallowingHooks:
    """Hooks whose `on_delta` loses a cancel, as Python 3.11's `asyncio.wait_for` does (under
    redis-py's socket timeouts) when the cancel lands just as a command completes."""

    def __init__(self) -> None:
        self.in_delta = asyncio.Event()
        self.finished: list[str | None] = []

    async def on_delta(self, entry: InflightRequest, delta: GenerationDelta) -> None:
        self.in_delta.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)

    async def on_finish(self, entry: InflightRequest) -> None:
        await asyncio.sleep(0.01)  # a Redis write or two
        self.finished.append(entry.stop_reason)


async def test_close_ends_a_generation_whose_first_cancel_was_lost(backend: Any) -> None:
    backend.hold_after = 1
    registry = RequestRegistry(backend, GatewayMetrics(), cancel_grace_s=0.1)
    hooks = CancelSwallowingHooks()
    entry = registry.start(GenerationRequest("alpha/r", "small", "the fox", 5), 2, public_id="r", hooks=hooks)
    await asyncio.wait_for(hooks.in_delta.wait(), 2)

    await asyncio.wait_for(registry.close(), 2)
    assert entry.done and entry.stop_reason == "cancelled"
    assert backend.closed == ["alpha/r"]  # the stream was closed: the server frees the KV
    assert hooks.finished == ["cancelled"]  # its end was recorded before close() returned
