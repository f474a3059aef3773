"""The bulk queue: per batch, a Redis Stream of references into the stored input file.

    sy:batch:{id}:chunks    stream   one entry per run of input lines (`ChunkRef`), not payloads:
                                     50,000 requests of 1 KB are ~200 entries of ~100 bytes
        group "dispatchers"          each chunk is delivered to one dispatcher at a time

A dispatcher reads chunks (XREADGROUP), releases their entries, and acknowledges a chunk
(XACK + XDEL) once every entry in it has its result marked. While it works it keeps its
chunks fresh (XCLAIM to itself, resetting their idle time); a chunk idle longer than
`reclaim_idle_s` belongs to a dispatcher that died and is claimed by another (XAUTOCLAIM),
which skips the entries already marked. So nothing is lost, and `bulk.results` makes sure
nothing is recorded twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from bulk.ingest import ChunkRef

GROUP = "dispatchers"
_FIELDS = ("first_line", "last_line", "byte_start", "byte_end", "entries", "cost_tokens")


@dataclass(frozen=True, slots=True)
class QueuedChunk:
    """A chunk delivered to this dispatcher: `message_id` is what it acknowledges."""

    batch_id: str
    message_id: str
    chunk: ChunkRef


def chunks_key(batch_id: str) -> str:
    return f"sy:batch:{batch_id}:chunks"


class ChunkQueue:
    """Adds, delivers, refreshes, reclaims and acknowledges a batch's chunks."""

    def __init__(self, client: aioredis.Redis, consumer: str) -> None:
        self._redis = client
        self.consumer = consumer

    async def add(self, batch_id: str, chunks: Sequence[ChunkRef]) -> None:
        key = chunks_key(batch_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xgroup_create(key, GROUP, id="0", mkstream=True)
            for chunk in chunks:
                fields: dict[Any, Any] = {name: getattr(chunk, name) for name in _FIELDS}
                fields["invalid"] = ",".join(map(str, chunk.invalid_lines))
                pipe.xadd(key, fields)
            await pipe.execute()

    async def read(self, batch_id: str, count: int = 1) -> list[QueuedChunk]:
        """Up to `count` chunks never delivered before."""
        try:
            reply: Any = await self._redis.xreadgroup(GROUP, self.consumer, {chunks_key(batch_id): ">"}, count=count)
        except ResponseError as exc:  # the batch ended and its stream is gone
            if "NOGROUP" in str(exc):
                return []
            raise
        if not reply:
            return []
        return [_queued(batch_id, message_id, fields) for message_id, fields in reply[0][1] if fields]

    async def reclaim(self, batch_id: str, min_idle_s: float, count: int = 16) -> list[QueuedChunk]:
        """Chunks another dispatcher took and has not touched for `min_idle_s`: now this one's.

        XAUTOCLAIM looks at a bounded slice of the pending list per call, so this follows its
        cursor through the whole list (chunks kept fresh by live dispatchers are skipped)."""
        claimed: list[QueuedChunk] = []
        cursor: Any = "0-0"
        while len(claimed) < count:
            try:
                reply: Any = await self._redis.xautoclaim(
                    chunks_key(batch_id), GROUP, self.consumer, int(min_idle_s * 1000),
                    start_id=cursor, count=count - len(claimed),
                )  # fmt: skip
            except ResponseError as exc:
                if "NOGROUP" in str(exc):
                    return claimed
                raise
            claimed += [_queued(batch_id, message_id, fields) for message_id, fields in reply[1] if fields]
            cursor = reply[0]
            if _text(cursor) == "0-0":
                break
        return claimed

    async def touch(self, batch_id: str, message_ids: Sequence[str]) -> None:
        """Reset the idle time of chunks this dispatcher still works on (it is alive)."""
        if message_ids:
            await self._redis.xclaim(chunks_key(batch_id), GROUP, self.consumer, 0, list(message_ids), justid=True)

    async def ack(self, batch_id: str, message_id: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xack(chunks_key(batch_id), GROUP, message_id)
            pipe.xdel(chunks_key(batch_id), message_id)
            await pipe.execute()

    async def remaining(self, batch_id: str) -> int:
        """Chunks not yet acknowledged (queued or being worked on)."""
        return int(await self._redis.xlen(chunks_key(batch_id)))

    async def drain(self, batch_id: str) -> list[QueuedChunk]:
        """Every chunk not yet acknowledged, whoever holds it (for expiry and cancellation)."""
        reply: Any = await self._redis.xrange(chunks_key(batch_id))
        return [_queued(batch_id, message_id, fields) for message_id, fields in reply]

    async def delete(self, batch_id: str) -> None:
        await self._redis.delete(chunks_key(batch_id))


def _queued(batch_id: str, message_id: bytes | str, fields: dict[Any, Any]) -> QueuedChunk:
    values = {_text(k): _text(v) for k, v in fields.items()}
    invalid = tuple(int(line) for line in values.get("invalid", "").split(",") if line)
    chunk = ChunkRef(**{name: int(values[name]) for name in _FIELDS}, invalid_lines=invalid)
    return QueuedChunk(batch_id, _text(message_id), chunk)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
