"""Connections reading a generation, and what their leaving does.

A request may have several readers: the connection that sent it, and repeats of its
`request_id` that attached to it. A reader that goes away cancels the request only when it was
the last one, so a client that reconnects with the same id (a retry after a dropped
connection) finds its reply still being written, while a closed tab still frees the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager

from serving.requests_registry import InflightRequest, RequestRegistry


@contextmanager
def reading(entry: InflightRequest, registry: RequestRegistry) -> Iterator[None]:
    """Count the caller as a reader for the block; cancel the request if it leaves last."""
    entry.readers += 1
    try:
        yield
    finally:
        entry.readers -= 1
        if not entry.done and entry.readers == 0:
            # We may be inside a cancelled scope here, so hand the cancel to its own task.
            registry.cancel_soon(entry.request_id)


async def wait_unless_gone(
    entry: InflightRequest, registry: RequestRegistry, ready: Awaitable[None], gone: Awaitable[None]
) -> bool:
    """Await `ready` as one of the request's readers; False if the reader left first (`gone`
    completed: then the request is cancelled, unless another reader is still on it)."""
    entry.readers += 1
    waiter = asyncio.ensure_future(ready)
    watcher = asyncio.ensure_future(gone)
    try:
        await asyncio.wait({waiter, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, watcher):
            task.cancel()
        entry.readers -= 1
    completed = waiter.done() and not waiter.cancelled()
    if not completed and not entry.done and entry.readers == 0:
        await registry.cancel(entry.request_id)
    return completed
