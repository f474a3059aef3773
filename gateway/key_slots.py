"""Per-key caps: how many requests, and streamed replies among them, one API key may have in
flight, so one team's runaway client cannot take every connection and task of a gateway.

    EdgeGuard ── slots.acquire(key_id) ──▶ KeySlot | None (None: 429 before the body is read)
    route (stream: true) ── claim_stream(request) ── 429 when the key's streams are at the cap
    end of the response ── slot.release()  (its stream too)

Counts live in this process's memory (nothing per request reaches Redis): a gateway of N
worker processes gives each 1/N of the configured caps (rounded up), so a key reaches at most
about the configured number across the gateway, and a little less when the kernel hands one
worker more than its share of the key's connections. The admin key (the bulk dispatcher,
operators) has no slot: its own settings bound it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fastapi import Request

from contracts.errors import ApiError

SLOT_SCOPE_KEY = "switchyard.key_slot"  # the request's KeySlot in its ASGI scope


@dataclass(slots=True)
class _KeyLoad:
    requests: int = 0
    streams: int = 0


class KeySlots:
    """Requests and streams in flight per key, in this process."""

    def __init__(self, max_requests: int, max_streams: int, retry_after_s: int) -> None:
        self.max_requests = max_requests
        self.max_streams = max_streams
        self.retry_after_s = retry_after_s
        self._loads: dict[str, _KeyLoad] = {}

    @classmethod
    def per_worker(cls, max_requests: int, max_streams: int, workers: int, retry_after_s: int) -> KeySlots:
        """This process's share of a gateway's per-key caps."""
        return cls(math.ceil(max_requests / workers), math.ceil(max_streams / workers), retry_after_s)

    def acquire(self, key_id: str) -> KeySlot | None:
        """A slot for one more request of `key_id`; None when the key is at its cap."""
        load = self._loads.setdefault(key_id, _KeyLoad())
        if load.requests >= self.max_requests:
            return None
        load.requests += 1
        return KeySlot(self, key_id)

    def in_flight(self, key_id: str) -> tuple[int, int]:
        """(requests, streams) of `key_id` in flight here."""
        load = self._loads.get(key_id)
        return (0, 0) if load is None else (load.requests, load.streams)

    def count_stream(self, key_id: str) -> bool:
        """One more stream of a key holding a request here; False at the streams cap."""
        load = self._loads[key_id]
        if load.streams >= self.max_streams:
            return False
        load.streams += 1
        return True

    def release(self, key_id: str, stream: bool) -> None:
        """A request of `key_id` (a stream if `stream`) ended."""
        load = self._loads[key_id]
        load.requests -= 1
        load.streams -= int(stream)
        if load.requests == 0:
            del self._loads[key_id]  # idle keys cost nothing


class KeySlot:
    """One request's place among its key's; released once, at the end of its response."""

    __slots__ = ("key_id", "owner", "released", "stream")

    def __init__(self, slots: KeySlots, key_id: str) -> None:
        self.owner = slots
        self.key_id = key_id
        self.stream = False
        self.released = False

    def open_stream(self) -> bool:
        """Count this request as a stream too; False when the key's streams are at the cap."""
        if self.stream:
            return True
        self.stream = self.owner.count_stream(self.key_id)
        return self.stream

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.owner.release(self.key_id, self.stream)


def too_many(what: str, limit: int, retry_after_s: int) -> ApiError:
    """429 for a key at one of its caps."""
    return ApiError(
        429,
        "rate_limit_error",
        f"this API key already has {limit} {what} in flight on this gateway process (the most it may); "
        "wait for one to end, then retry",
        None,
        {"Retry-After": str(retry_after_s)},
        code="too_many_concurrent_requests",
    )


def claim_stream(request: Request) -> None:
    """Before a streamed reply starts: count it against its key's streams, or 429. A request
    without a slot (the admin key, an app served without the edge guard) is not counted."""
    slot = request.scope.get(SLOT_SCOPE_KEY)
    if not isinstance(slot, KeySlot):
        return
    if not slot.open_stream():
        limits = slot.owner
        raise too_many("streams", limits.max_streams, limits.retry_after_s)
