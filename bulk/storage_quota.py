"""A team's stored bytes against its storage quota: one counter per team, reserved as an upload
streams in, so a team over its quota is refused before its bytes are kept.

    sy:storage:{team}   string   bytes the team holds: uploads, native batch inputs, output
                                 files, plus what uploads in progress have reserved

An upload reserves before it stores (the Content-Length when the client sends one, then in
steps of `RESERVE_STEP_BYTES` as the body outgrows it), so concurrent uploads cannot overshoot
the limit together. When the upload is kept, the record's creation moves the counter to the
stored size in the same transaction (`FileStore.create`, `BatchStore.create`: `reserved=`);
when it is refused, `release` gives the reservation back. Deleting or expiring a file or
batch takes its bytes off (`bulk.retention`).

A gateway killed in the middle of an upload leaves its reservation counted (at most the
Content-Length of the uploads it was reading); it is the one way the counter drifts up.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from bulk.ingest import IngestRefused
from config.settings import SwitchyardConfig

RESERVE_STEP_BYTES = 8 << 20  # a body without Content-Length reserves this much at a time

# KEYS[1] counter  ARGV[1] bytes  ARGV[2] limit. Returns {1, used after} or {0, used}.
_RESERVE = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if used + want > tonumber(ARGV[2]) then return {0, used} end
return {1, redis.call('INCRBY', KEYS[1], want)}
"""


def storage_key(team_id: str) -> str:
    return f"sy:storage:{team_id}"


class StorageQuotaExceeded(IngestRefused):
    """The team's stored bytes plus this upload would pass its limit: a 413 (the upload is too
    large for what the team may still store), code `storage_quota_exceeded`."""

    def __init__(self, team_id: str, used: int, wanted: int, limit: int) -> None:
        super().__init__(
            413,
            f"storage quota exceeded: team {team_id!r} stores {_size(used)} of its {_size(limit)} limit "
            f"and this upload needs {_size(wanted)} more; delete files (DELETE /v1/files/{{file_id}}) "
            "or wait for them to expire",
        )
        self.team_id = team_id
        self.used = used
        self.wanted = wanted
        self.limit = limit


@dataclass(frozen=True, slots=True)
class StorageUsage:
    used_bytes: int
    limit_bytes: int


class StorageQuota:
    """Per-team limits from the config, and the counters in Redis."""

    def __init__(self, config: SwitchyardConfig, client: aioredis.Redis) -> None:
        self._default = config.bulk.team_storage_bytes
        self._limits = {team: spec.storage_bytes for team, spec in config.teams.items()}
        self._redis = client
        self._reserve = client.register_script(_RESERVE)

    def limit(self, team_id: str) -> int:
        limit = self._limits.get(team_id)
        return self._default if limit is None else limit

    async def usage(self, team_id: str) -> StorageUsage:
        raw: Any = await self._redis.get(storage_key(team_id))
        return StorageUsage(max(0, int(raw or 0)), self.limit(team_id))

    def reservation(self, team_id: str) -> Reservation:
        return Reservation(self, team_id)

    async def _take(self, team_id: str, size: int) -> None:
        limit = self.limit(team_id)
        ok, used = await self._reserve(keys=[storage_key(team_id)], args=[size, limit])
        if not int(ok):
            raise StorageQuotaExceeded(team_id, int(used), size, limit)

    async def _give_back(self, team_id: str, size: int) -> None:
        await self._redis.decrby(storage_key(team_id), size)


class Reservation:
    """Bytes one upload holds against its team's quota while it streams in.

    `reserve(n)` makes sure at least `n` bytes are held (raises StorageQuotaExceeded when the
    team has no room for them); `metered(source)` does so as the bytes pass. Then either the
    record's creation takes `reserved` over, or `release` gives it back.
    """

    def __init__(self, quota: StorageQuota, team_id: str) -> None:
        self._quota = quota
        self.team_id = team_id
        self.reserved = 0

    async def reserve(self, size: int) -> None:
        if size > self.reserved:
            await self._quota._take(self.team_id, size - self.reserved)
            self.reserved = size

    async def metered(self, source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """`source`, reserving ahead of each piece before handing it on."""
        seen = 0
        async for piece in source:
            seen += len(piece)
            if seen > self.reserved:
                try:
                    await self.reserve(seen + RESERVE_STEP_BYTES)
                except StorageQuotaExceeded:
                    await self.reserve(seen)  # room for what came, not a step more: go on
            yield piece

    async def release(self) -> None:
        """The upload was refused: its reservation goes back."""
        if self.reserved:
            reserved, self.reserved = self.reserved, 0
            await self._quota._give_back(self.team_id, reserved)


def _size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"
