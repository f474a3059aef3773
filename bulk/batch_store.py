"""Batch records in Redis: what a batch is, where it stands, and its counts as they change.

    sy:batch:{id}          hash    the record (fields of `BatchRecord`) and its counts
    sy:batches:{team}      zset    the team's batch ids by creation time (GET /v1/batches)
    sy:batches:active      zset    batches the dispatcher works on, by deadline

A native upload's input counts in the team's storage (`input_bytes`, `bulk.storage_quota`)
until the batch's record expires (`bulk.retention`).

Statuses are OpenAI's:

    in_progress ──(every entry ended)──▶ finalizing ──(results written out)──▶ completed
        │                                                                    ├▶ expired
        └──cancel──▶ cancelling ──(running entries ended)──▶ finalizing ────▶ cancelled

Counts change only in Lua scripts (`bulk/results.py` marks entries), so every gateway and
dispatcher reads the same numbers; `pending` is what is neither done, failed nor expired.
Lines refused at upload count as failed from the start (they are in the errors file).
"""

from __future__ import annotations

import enum
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from bulk.storage_quota import storage_key

ACTIVE_KEY = "sy:batches:active"


class BatchStatus(str, enum.Enum):
    VALIDATING = "validating"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def ended(self) -> bool:
        return self in (BatchStatus.COMPLETED, BatchStatus.EXPIRED, BatchStatus.CANCELLED, BatchStatus.FAILED)


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One batch. Times are unix seconds; `None` for what has not happened yet."""

    batch_id: str
    team_id: str
    model_id: str
    line_format: str  # "native" or "openai" (`bulk.batch_lines`)
    endpoint: str  # where each entry is sent: /v1/generate, /v1/completions, /v1/chat/completions
    input_key: str  # the stored input file in the blob store
    input_file_id: str | None
    filename: str
    status: BatchStatus
    created_at: float
    deadline: float
    total: int  # non-blank input lines
    invalid: int = 0  # lines refused at upload (counted in `failed` too)
    done: int = 0
    failed: int = 0
    expired: int = 0
    started_at: float | None = None
    finalizing_at: float | None = None
    finished_at: float | None = None
    cancelling_at: float | None = None
    at_risk: bool = False
    output_file_id: str | None = None
    error_file_id: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    # What the client sent for the deadline (OpenAI's `completion_window`, the native `deadline`),
    # echoed back as sent; None for batches made before it was kept.
    completion_window: str | None = None
    input_bytes: int = 0  # the stored input this batch holds in its team's storage (native uploads)
    output_ttl_s: int | None = None  # its output files' lifetime (OpenAI's output_expires_after)

    @property
    def pending(self) -> int:
        return max(0, self.total - self.done - self.failed - self.expired)

    @property
    def finished_entries(self) -> int:
        return self.done + self.failed + self.expired


# What a batch or file id made here looks like: a caller's id outside it (`batch_x:chunks`
# would name the batch's chunk stream) is never looked up.
STORED_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def new_batch_id() -> str:
    return f"batch_{uuid.uuid4().hex[:24]}"


def batch_key(batch_id: str) -> str:
    return f"sy:batch:{batch_id}"


_INT_FIELDS = ("total", "invalid", "done", "failed", "expired", "input_bytes")

# Moves a batch from one status to another only from the statuses given, stamping the time.
# KEYS[1] batch  ARGV[1] new status  ARGV[2] time field ('' for none)  ARGV[3] now  ARGV[4..] allowed from
_TRANSITION = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'', ''} end
for i = 4, #ARGV do
  if status == ARGV[i] then
    redis.call('HSET', KEYS[1], 'status', ARGV[1])
    if ARGV[2] ~= '' then redis.call('HSETNX', KEYS[1], ARGV[2], ARGV[3]) end
    return {'1', status}
  end
end
return {'', status}
"""

# KEYS[1] batch  KEYS[2] team's batches  KEYS[3] active  KEYS[4] team's storage  ARGV[1] batch id
# Returns 1 if this call removed the record (its input's bytes leave the team's storage once).
_DELETE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local size = tonumber(redis.call('HGET', KEYS[1], 'input_bytes') or '0')
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if size ~= 0 then redis.call('DECRBY', KEYS[4], size) end
return 1
"""


class BatchStore:
    """Creates, reads and moves batch records; the counts move in `bulk.results`."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        self._transition = client.register_script(_TRANSITION)
        self._delete = client.register_script(_DELETE)

    async def create(self, record: BatchRecord, *, reserved: int = 0) -> None:
        """Store a new batch; `reserved`: bytes its upload already holds in the team's storage,
        which `input_bytes` replaces."""
        fields: dict[Any, Any] = {
            "batch_id": record.batch_id,
            "team_id": record.team_id,
            "model_id": record.model_id,
            "line_format": record.line_format,
            "endpoint": record.endpoint,
            "input_key": record.input_key,
            "filename": record.filename,
            "status": record.status.value,
            "created_at": record.created_at,
            "deadline": record.deadline,
            "metadata": json.dumps(record.metadata),
            **{name: getattr(record, name) for name in _INT_FIELDS},
        }
        if record.input_file_id is not None:
            fields["input_file_id"] = record.input_file_id
        if record.completion_window is not None:
            fields["completion_window"] = record.completion_window
        if record.output_ttl_s is not None:
            fields["output_ttl_s"] = record.output_ttl_s
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(batch_key(record.batch_id), mapping=fields)
            if record.input_bytes != reserved:
                pipe.incrby(storage_key(record.team_id), record.input_bytes - reserved)
            pipe.zadd(f"sy:batches:{record.team_id}", {record.batch_id: record.created_at})
            if not record.status.ended:
                pipe.zadd(ACTIVE_KEY, {record.batch_id: record.deadline})
            await pipe.execute()

    async def get(self, batch_id: str) -> BatchRecord | None:
        if not STORED_ID.fullmatch(batch_id):  # a caller's string that names no batch, or another key
            return None
        raw = await self._redis.hgetall(batch_key(batch_id))
        return _record(raw) if raw else None

    async def get_for_team(self, team_id: str, batch_id: str) -> BatchRecord | None:
        """The batch if it is this team's: another team's batch is as good as absent (404)."""
        record = await self.get(batch_id)
        return record if record is not None and record.team_id == team_id else None

    async def list_for_team(self, team_id: str, limit: int = 20, after: str | None = None) -> list[BatchRecord]:
        """Newest first; `after` a batch id from the previous page."""
        key = f"sy:batches:{team_id}"
        start = 0
        if after is not None:
            rank: Any = await self._redis.zrevrank(key, after)
            start = 0 if rank is None else int(rank) + 1
        ids: list[Any] = await self._redis.zrevrange(key, start, start + limit - 1)
        records = [await self.get(_text(batch_id)) for batch_id in ids]
        return [record for record in records if record is not None]

    async def active_ids(self) -> list[str]:
        """Batches still being worked on, earliest deadline first."""
        ids: list[Any] = await self._redis.zrange(ACTIVE_KEY, 0, -1)
        return [_text(batch_id) for batch_id in ids]

    async def transition(
        self, batch_id: str, to: BatchStatus, *, allowed_from: tuple[BatchStatus, ...], stamp: str | None, now: float
    ) -> bool:
        """Move to `to` if the batch is in one of `allowed_from`; stamp `stamp` with `now` once."""
        moved, _ = await self._transition(
            keys=[batch_key(batch_id)], args=[to.value, stamp or "", now, *(s.value for s in allowed_from)]
        )
        if moved and to.ended:
            await self._redis.zrem(ACTIVE_KEY, batch_id)
        return bool(moved)

    async def mark_started(self, batch_id: str, now: float) -> None:
        await self._redis.hsetnx(batch_key(batch_id), "started_at", now)

    async def set_fields(self, batch_id: str, **fields: str | float | int) -> None:
        await self._redis.hset(batch_key(batch_id), mapping=dict[Any, Any](fields))

    async def delete(self, record: BatchRecord) -> bool:
        """Remove the record from Redis and its input from the team's storage; False when it
        was already gone. Results, queue and blobs are `bulk.retention`'s to remove."""
        keys = [batch_key(record.batch_id), f"sy:batches:{record.team_id}", ACTIVE_KEY, storage_key(record.team_id)]
        return bool(await self._delete(keys=keys, args=[record.batch_id]))


def _record(raw: dict[Any, Any]) -> BatchRecord:
    values = {_text(k): _text(v) for k, v in raw.items()}

    def count(name: str) -> int:
        return int(values.get(name, 0))

    def when(name: str) -> float | None:
        return float(values[name]) if name in values else None

    return BatchRecord(
        batch_id=values["batch_id"],
        team_id=values["team_id"],
        model_id=values["model_id"],
        line_format=values["line_format"],
        endpoint=values["endpoint"],
        input_key=values["input_key"],
        input_file_id=values.get("input_file_id"),
        filename=values.get("filename", ""),
        status=BatchStatus(values["status"]),
        created_at=float(values["created_at"]),
        deadline=float(values["deadline"]),
        total=count("total"),
        invalid=count("invalid"),
        done=count("done"),
        failed=count("failed"),
        expired=count("expired"),
        started_at=when("started_at"),
        finalizing_at=when("finalizing_at"),
        finished_at=when("finished_at"),
        cancelling_at=when("cancelling_at"),
        at_risk=values.get("at_risk") == "1",
        output_file_id=values.get("output_file_id"),
        error_file_id=values.get("error_file_id"),
        metadata=json.loads(values.get("metadata", "{}")),
        completion_window=values.get("completion_window"),
        input_bytes=count("input_bytes"),
        output_ttl_s=int(values["output_ttl_s"]) if "output_ttl_s" in values else None,
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
