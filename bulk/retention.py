"""Retention: stored files and ended batches go when they expire, bytes and records alike.

What expires, and when (`bulk.*` settings; OpenAI's defaults):

    uploaded file      created_at + expires_after.seconds    (file_ttl_s, 30 days, without it)
    output/error file  created_at + output_expires_after     (output_file_ttl_s, 30 days)
    batch record       finished_at + batch_ttl_s             (30 days; with a native upload's
                                                              input, its refused lines, its queue)

Each is scheduled in `sy:expiry` as it is stored (`bulk.retention_schedule`); a dispatcher's
`run` loop calls `sweep`, which reads only the members due (ZRANGEBYSCORE ... LIMIT), so a
sweep costs O(log n + expired), never a scan of what is kept. A short Redis lock keeps two
dispatchers from sweeping at once; every step is idempotent, so a sweeper that dies half way
leaves its item scheduled and the next sweep finishes it.

A file that a running batch reads (`FileStore.users`) keeps its bytes until the batch ends:
its expiry is put off to the batch's deadline. `DELETE /v1/files/{id}` (OpenAI allows it while
a batch runs) removes the record at once, so the file is gone for its team and out of its
storage; the bytes stay for the batch, and the sweep removes them after it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from bulk.batch_store import BatchRecord, BatchStore
from bulk.blob_store import BlobStore
from bulk.chunk_queue import ChunkQueue
from bulk.file_store import FileRecord, FileStore
from bulk.results import ResultStore, errors_key, input_key, invalid_key, results_key
from bulk.retention_schedule import EXPIRY_KEY, ExpiryItem, batch_item, file_item
from config.settings import BulkSpec

logger = logging.getLogger(__name__)

_LOCK_KEY = "sy:expiry:sweeper"
_LOCK_TTL_S = 120
SWEEP_BATCH = 500  # members read per ZRANGEBYSCORE; a sweep goes on until nothing is due


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long things are kept (seconds), and how often a dispatcher sweeps."""

    file_ttl_s: int
    output_file_ttl_s: int
    batch_ttl_s: int
    sweep_s: float

    @classmethod
    def from_spec(cls, spec: BulkSpec) -> RetentionPolicy:
        return cls(spec.file_ttl_s, spec.output_file_ttl_s, spec.batch_ttl_s, spec.retention_sweep_s)


@dataclass(frozen=True, slots=True)
class SweepReport:
    files: int = 0  # files whose record or bytes went
    batches: int = 0
    deferred: int = 0  # files a running batch still reads: put off


class Retention:
    """Schedules ended batches, deletes files on request and sweeps what has expired."""

    def __init__(
        self,
        client: aioredis.Redis,
        blobs: BlobStore,
        files: FileStore,
        batches: BatchStore,
        policy: RetentionPolicy,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        self._redis = client
        self._blobs = blobs
        self._files = files
        self._batches = batches
        self._results = ResultStore(client, blobs)
        self._queue = ChunkQueue(client, consumer="retention")
        self._clock = clock

    async def schedule_batch(self, batch_id: str, ended_at: float) -> None:
        """A batch has ended: its record goes `batch_ttl_s` later."""
        await self._redis.zadd(EXPIRY_KEY, {batch_item(batch_id).member: ended_at + self.policy.batch_ttl_s})

    async def release_input(self, record: BatchRecord, now: float) -> None:
        """The batch has ended: an input file deleted (or expired) while the batch read it is
        due now, not at the deadline its expiry was put off to."""
        if record.input_file_id is None:
            return
        file = await self._files.get(record.input_file_id)
        if file is None or (file.expires_at is not None and file.expires_at <= now):
            member = file_item(record.input_file_id, record.input_key).member
            await self._redis.zadd(EXPIRY_KEY, {member: now}, xx=True)  # xx: never bring a done item back

    async def delete_file(self, record: FileRecord, now: float) -> bool:
        """`DELETE /v1/files/{id}`: the record goes now; the bytes too unless a running batch
        reads them. False when the record was already gone."""
        if not await self._files.delete(record):
            return False
        await self._expire_file(file_item(record.file_id, record.blob_key), now)
        return True

    async def sweep(self, now: float | None = None) -> SweepReport:
        """Delete everything due by `now`; nothing when another dispatcher is sweeping."""
        now = self._clock() if now is None else now
        if not await self._redis.set(_LOCK_KEY, "1", nx=True, ex=_LOCK_TTL_S):
            return SweepReport()
        files = batches = deferred = 0
        try:
            while True:
                members: list[Any] = await self._redis.zrangebyscore(EXPIRY_KEY, "-inf", now, start=0, num=SWEEP_BATCH)
                for member in members:
                    item = ExpiryItem.parse(member)
                    if item is None:
                        logger.warning("unknown expiry member left alone", extra={"member": str(member)})
                        await self._redis.zadd(EXPIRY_KEY, {member: now + self.policy.batch_ttl_s})
                    elif item.kind == "batch":
                        batches += await self._expire_batch(item, now)
                    elif await self._expire_file(item, now):
                        files += 1
                    else:
                        deferred += 1
                if len(members) < SWEEP_BATCH:
                    break
        finally:
            await self._redis.delete(_LOCK_KEY)
        if files or batches or deferred:
            logger.info("retention sweep", extra={"files": files, "batches": batches, "deferred": deferred})
        return SweepReport(files, batches, deferred)

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep every `policy.sweep_s` until `stop` is set (the dispatcher's process)."""
        while not stop.is_set():
            try:
                await self.sweep()
            except Exception:  # Redis or the blob store failing must not end the dispatcher
                logger.exception("retention sweep failed; retrying")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.policy.sweep_s)

    async def _expire_file(self, item: ExpiryItem, now: float) -> bool:
        """Remove the file's record and bytes unless a running batch reads it; then it is put
        off to that batch's deadline (and False returned)."""
        still_reading = await self._running_users(item.item_id, now)
        if still_reading:
            await self._redis.zadd(EXPIRY_KEY, {item.member: max(max(still_reading), now + self.policy.sweep_s)})
            return False
        record = await self._files.get(item.item_id)
        if record is not None:
            await self._files.delete(record)
        await self._blobs.delete(item.blob_key)
        await self._files.drop_users(item.item_id)
        await self._redis.zrem(EXPIRY_KEY, item.member)
        return True

    async def _running_users(self, file_id: str, now: float) -> list[float]:
        """The deadlines of batches that still read the file: not ended, or not recorded yet
        (being created) and before their deadline."""
        deadlines = []
        for batch_id, until in await self._files.users(file_id):
            record = await self._batches.get(batch_id)
            if (record is None and until > now) or (record is not None and not record.status.ended):
                deadlines.append(until)
        return deadlines

    async def _expire_batch(self, item: ExpiryItem, now: float) -> int:
        """Remove an ended batch: its stored input and refused lines, segments, marks, queue and
        record. Its output files have their own expiry."""
        batch_id = item.item_id
        record = await self._batches.get(batch_id)
        if record is not None and not record.status.ended:  # scheduled, then not ended: look again later
            await self._redis.zadd(EXPIRY_KEY, {item.member: max(record.deadline, now) + self.policy.batch_ttl_s})
            return 0
        stored = [input_key(batch_id), invalid_key(batch_id)]
        # An empty results or errors file has no file record (OpenAI leaves its id null).
        if record is not None and record.output_file_id is None:
            stored.append(results_key(batch_id))
        if record is not None and record.error_file_id is None:
            stored.append(errors_key(batch_id))
        for key in stored:
            await self._blobs.delete(key)
        await self._results.drop_segments(batch_id)
        await self._queue.delete(batch_id)
        if record is not None:
            await self._batches.delete(record)
            if record.input_file_id is not None:
                await self._files.remove_user(record.input_file_id, batch_id)
        await self._redis.zrem(EXPIRY_KEY, item.member)
        return 1
