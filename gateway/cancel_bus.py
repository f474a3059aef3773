"""Cancels reach the gateway process that owns a generation, whichever process received them.

Several gateway processes serve behind one port (`uvicorn --workers N`); a DELETE or a
repeat's disconnect lands on any of them. Each process subscribes to one Redis channel; a
cancel is published there and every process cancels the request if it runs it locally.

    DELETE ─▶ worker 2 ─PUBLISH sy:cancel "team/id"─▶ worker 1 (owner) ─▶ registry.cancel(id)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

logger = logging.getLogger(__name__)

CHANNEL = "sy:cancel"


class CancelBus:
    """Publish cancels; run `listen()` to apply the ones for requests this process owns."""

    def __init__(self, client: aioredis.Redis, on_cancel: Callable[[str], Awaitable[object]]) -> None:
        self._redis = client
        self._on_cancel = on_cancel
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    async def publish(self, scoped_id: str) -> int:
        """Ask every gateway process to cancel `scoped_id`; returns how many listened."""
        return int(await self._redis.publish(CHANNEL, scoped_id))

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="cancel-bus")
        await asyncio.wait_for(self._subscribed.wait(), timeout=10)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _listen(self) -> None:
        pubsub = self._redis.pubsub()
        await pubsub.subscribe(CHANNEL)
        self._subscribed.set()
        try:
            async for message in pubsub.listen():
                if message.get("type") != "message":
                    continue
                data = message["data"]
                scoped_id = data.decode() if isinstance(data, bytes) else str(data)
                try:
                    await self._on_cancel(scoped_id)
                except Exception:
                    logger.exception("applying a cancel of %s failed", scoped_id)
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
