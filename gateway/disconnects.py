"""An HTTP reader of a generation that may leave before its reply is ready.

Starlette watches for disconnects only while a streaming body is being sent; before that (and
for a whole reply) nobody would notice a client that left, and its generation would run on
for no one. The serving core's `wait_unless_gone` takes any "the reader left" signal; here it
is the ASGI `http.disconnect` message.
"""

from __future__ import annotations

from collections.abc import Awaitable

from fastapi import Request

from serving.readers import wait_unless_gone
from serving.requests_registry import InflightRequest, RequestRegistry


async def wait_unless_disconnected(
    request: Request, entry: InflightRequest, registry: RequestRegistry, ready: Awaitable[None]
) -> bool:
    """Await `ready` as one of the request's readers; False if the client left first."""
    return await wait_unless_gone(entry, registry, ready, until_disconnected(request))


async def until_disconnected(request: Request) -> None:
    """Returns once the client has closed its connection."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
