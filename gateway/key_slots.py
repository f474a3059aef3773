"""Per-key caps and per-team stream shares: how many requests, and streamed replies among
them, one API key may have in flight, and how a worker's streams are shared by team weight,
so one team's runaway client cannot take every connection and task of a gateway.

    EdgeGuard ── slots.acquire(key_id, team_id) ──▶ KeySlot | None (None: 429, body unread)
    route (stream: true) ── claim_stream(request) ── 429 when the key's streams are at the cap
                                                     429 when its team is past its share of
                                                         the worker's streams (quota/stream_shares.py)
                                                     503 when the worker holds its most streams
    end of the response ── slot.release()  (its stream too)

The gRPC door counts its requests and streams on the same slots (gateway/grpc_door/service.py).

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
from quota.stream_shares import StreamShares, StreamVerdict

SLOT_SCOPE_KEY = "switchyard.key_slot"  # the request's KeySlot in its ASGI scope


@dataclass(slots=True)
class _KeyLoad:
    requests: int = 0
    streams: int = 0


class KeySlots:
    """Requests and streams in flight per key, and streams per team, in this process."""

    def __init__(self, max_requests: int, max_streams: int, retry_after_s: int, streams: StreamShares) -> None:
        self.max_requests = max_requests
        self.max_streams = max_streams
        self.retry_after_s = retry_after_s
        self.streams = streams
        self._loads: dict[str, _KeyLoad] = {}

    @classmethod
    def per_worker(
        cls, max_requests: int, max_streams: int, workers: int, retry_after_s: int, streams: StreamShares
    ) -> KeySlots:
        """This process's share of a gateway's per-key caps (`streams` is already per worker)."""
        return cls(math.ceil(max_requests / workers), math.ceil(max_streams / workers), retry_after_s, streams)

    def acquire(self, key_id: str, team_id: str) -> KeySlot | None:
        """A slot for one more request of `key_id` (a key of `team_id`); None when the key is at
        its cap."""
        load = self._loads.setdefault(key_id, _KeyLoad())
        if load.requests >= self.max_requests:
            return None
        load.requests += 1
        return KeySlot(self, key_id, team_id)

    def in_flight(self, key_id: str) -> tuple[int, int]:
        """(requests, streams) of `key_id` in flight here."""
        load = self._loads.get(key_id)
        return (0, 0) if load is None else (load.requests, load.streams)

    def count_stream(self, key_id: str, team_id: str) -> None:
        """One more stream of a key holding a request here; `ApiError` 429 at the key's cap
        or past its team's share of this worker's streams, 503 at the worker's maximum."""
        load = self._loads[key_id]
        if load.streams >= self.max_streams:
            raise too_many("streams", self.max_streams, self.retry_after_s)
        claim = self.streams.claim(team_id)
        if claim.verdict is StreamVerdict.FULL:
            raise workers_streams_full(self.streams.max_streams, self.retry_after_s)
        if claim.verdict is StreamVerdict.OVER_SHARE:
            raise over_stream_share(team_id, claim.held, claim.share, self.streams.max_streams, self.retry_after_s)
        load.streams += 1

    def release(self, key_id: str, team_id: str, stream: bool) -> None:
        """A request of `key_id` (a stream if `stream`) ended."""
        load = self._loads[key_id]
        load.requests -= 1
        if stream:
            load.streams -= 1
            self.streams.release(team_id)
        if load.requests == 0:
            del self._loads[key_id]  # idle keys cost nothing


class KeySlot:
    """One request's place among its key's; released once, at the end of its response."""

    __slots__ = ("key_id", "owner", "released", "stream", "team_id")

    def __init__(self, slots: KeySlots, key_id: str, team_id: str) -> None:
        self.owner = slots
        self.key_id = key_id
        self.team_id = team_id
        self.stream = False
        self.released = False

    def open_stream(self) -> None:
        """Count this request as a stream too (once); `ApiError` 429 / 503 when it may not be
        one (`KeySlots.count_stream`)."""
        if not self.stream:
            self.owner.count_stream(self.key_id, self.team_id)
            self.stream = True

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.owner.release(self.key_id, self.team_id, self.stream)


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


def over_stream_share(team_id: str, held: int, share: int, max_streams: int, retry_after_s: int) -> ApiError:
    """429 for a team past its share of a worker's streams while they are contended."""
    return ApiError(
        429,
        "rate_limit_error",
        f"team {team_id!r} holds {held} streams on this gateway process, past its share of {share} of "
        f"its {max_streams}, and the rest are kept for other teams; wait for one of your streams to "
        "end, then retry",
        None,
        {"Retry-After": str(retry_after_s)},
        code="team_streams_over_share",
    )


def workers_streams_full(max_streams: int, retry_after_s: int) -> ApiError:
    """503 for a worker that holds its most streams (every team within its share)."""
    return ApiError(
        503,
        "service_unavailable",
        f"this gateway process holds its most streams ({max_streams}); retry shortly",
        None,
        {"Retry-After": str(retry_after_s)},
        code="gateway_streams_full",
    )


def claim_stream(request: Request) -> None:
    """Before a streamed reply starts: count it against its key's streams and its team's share,
    or 429 / 503. A request without a slot (the admin key, an app served without the edge
    guard) is not counted."""
    slot = request.scope.get(SLOT_SCOPE_KEY)
    if isinstance(slot, KeySlot):
        slot.open_stream()
