"""Cancels and attaches reach the gateway process that owns a generation, whichever process
received them.

Several gateway processes serve behind one port (`uvicorn --workers N`); a DELETE or a repeat
of a request id lands on any of them. Each process subscribes to one Redis channel; a message
names what to do and the request, and the process that runs the request acts on it:

    DELETE ─▶ worker 2 ─PUBLISH sy:requests "cancel team/id"─▶ worker 1 (owner) cancels it
    repeat ─▶ worker 2 ─PUBLISH sy:requests "attach team/id"─▶ worker 1 mirrors its deltas to
                                                                Redis for worker 2 to follow

One PUBLISH per cancel or attach: nothing is written per delta unless someone follows.

When Redis goes away (a restart, a Sentinel failover: docs/redis.md) the process subscribes
again, every `RESUBSCRIBE_S` until it is back; messages published in between are lost, as
pub/sub loses them: a cancel then ends its request by the request's own deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

CHANNEL = "sy:requests"
RESUBSCRIBE_S = 0.5


class BusMessage(enum.Enum):
    CANCEL = "cancel"
    ATTACH = "attach"


# Applies one message to this process's requests (ignoring the ones it does not run).
BusHandler = Callable[[BusMessage, str], Awaitable[object]]


class RequestBus:
    """Publish cancels and attaches; `start(handler)` applies the ones every process hears."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    async def publish(self, message: BusMessage, scoped_id: str) -> int:
        """Tell every gateway process; returns how many listened."""
        return int(await self._redis.publish(CHANNEL, f"{message.value} {scoped_id}"))

    async def start(self, handler: BusHandler) -> None:
        self._task = asyncio.create_task(self._listen(handler), name="request-bus")
        await asyncio.wait_for(self._subscribed.wait(), timeout=10)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _listen(self, handler: BusHandler) -> None:
        while True:
            try:
                await self._listen_once(handler)
            except (RedisError, OSError) as exc:  # Redis restarted or failed over
                logger.warning("request bus lost Redis (%s): subscribing again", exc)
            await asyncio.sleep(RESUBSCRIBE_S)

    async def _listen_once(self, handler: BusHandler) -> None:
        pubsub = self._redis.pubsub()
        await pubsub.subscribe(CHANNEL)
        self._subscribed.set()
        try:
            async for message in pubsub.listen():
                if message.get("type") != "message":
                    continue
                data = message["data"]
                kind, _, scoped_id = (data.decode() if isinstance(data, bytes) else str(data)).partition(" ")
                try:
                    await handler(BusMessage(kind), scoped_id)
                except Exception:
                    logger.exception("applying %s of %s failed", kind, scoped_id)
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()  # type: ignore[no-untyped-call]
