"""The end of a batch: its results written out as files, its final status, its queue gone.

    finalizing ──compact──▶ results.jsonl, errors.jsonl (files the team can download)
               ──status───▶ completed | expired (some entries ran out of time) | cancelled
               ──cleanup──▶ marks, segments and the chunk stream deleted
               ──retention─▶ the output files expire `output_file_ttl_s` after they are
                             written (or the batch's output_expires_after), the record
                             `batch_ttl_s` after the batch ends (bulk/retention.py)

Any dispatcher may finalize a batch it finds `finalizing` (the one that began may have died);
a short Redis lock keeps two from compacting at once, and every step can run again.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis

from bulk.batch_store import BatchRecord, BatchStatus, BatchStore
from bulk.blob_store import BlobStore
from bulk.chunk_queue import ChunkQueue
from bulk.file_store import FileStore
from bulk.results import ResultStore, errors_key, results_key
from bulk.retention import Retention

logger = logging.getLogger(__name__)

_LOCK_TTL_S = 600


class Finalizer:
    def __init__(
        self,
        client: aioredis.Redis,
        blobs: BlobStore,
        batches: BatchStore,
        results: ResultStore,
        files: FileStore,
        queue: ChunkQueue,
        retention: Retention,
    ) -> None:
        self._redis = client
        self._retention = retention
        self._blobs = blobs
        self._batches = batches
        self._results = results
        self._files = files
        self._queue = queue

    async def finalize(self, batch_id: str, now: float) -> BatchRecord | None:
        """Finish a `finalizing` batch; the final record, or None if another dispatcher is at it."""
        lock = f"sy:batch:{batch_id}:finalizer"
        if not await self._redis.set(lock, self._queue.consumer, nx=True, ex=_LOCK_TTL_S):
            return None
        try:
            record = await self._batches.get(batch_id)
            if record is None or record.status is not BatchStatus.FINALIZING:
                return record
            results_size, errors_size = await self._results.compact(
                batch_id, self._blobs.open_writer(results_key(batch_id)), self._blobs.open_writer(errors_key(batch_id))
            )
            fields: dict[str, str | float | int] = {}
            outputs = (
                ("output_file_id", "output", results_size, results_key(batch_id)),
                ("error_file_id", "errors", errors_size, errors_key(batch_id)),
            )
            output_ttl_s = record.output_ttl_s or self._retention.policy.output_file_ttl_s
            for field, kind, size, key in outputs:
                if size:  # OpenAI leaves the id null when the file would be empty
                    file_id = f"file-{batch_id.removeprefix('batch_')}-{kind}"
                    await self._files.create(
                        record.team_id, "batch_output", f"{batch_id}_{kind}.jsonl", size, key,
                        file_id=file_id, now=now, expires_at=now + output_ttl_s,
                    )  # fmt: skip
                    fields[field] = file_id
            if fields:
                await self._batches.set_fields(batch_id, **fields)
            final = _final_status(record)
            await self._retention.schedule_batch(batch_id, now)  # first: a batch never ends unscheduled
            await self._batches.transition(
                batch_id, final, allowed_from=(BatchStatus.FINALIZING,), stamp="finished_at", now=now
            )
            await self._results.drop_segments(batch_id)
            await self._queue.delete(batch_id)
            await self._retention.release_input(record, now)
            logger.info(
                "batch ended",
                extra={
                    "batch_id": batch_id,
                    "team": record.team_id,
                    "status": final.value,
                    "done": record.done,
                    "failed": record.failed,
                    "expired": record.expired,
                },
            )
            return await self._batches.get(batch_id)
        finally:
            await self._redis.delete(lock)


def _final_status(record: BatchRecord) -> BatchStatus:
    if record.cancelling_at is not None:
        return BatchStatus.CANCELLED
    return BatchStatus.EXPIRED if record.expired else BatchStatus.COMPLETED
