"""Retention on a real Redis and a real LocalBlobStore, with the time passed in: what is due goes
(bytes, records, storage), nothing else is read, a file a running batch reads keeps its bytes
until the batch ends, and an ended batch goes with everything it stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bulk.batch_store import BatchRecord, BatchStatus, BatchStore
from bulk.blob_store import LocalBlobStore
from bulk.file_store import FileRecord, FileStore
from bulk.results import EntryResult, Outcome, ResultStore, input_key, invalid_key, output_record
from bulk.retention import Retention, RetentionPolicy, SweepReport
from bulk.retention_schedule import EXPIRY_KEY
from bulk.storage_quota import storage_key

POLICY = RetentionPolicy(file_ttl_s=100, output_file_ttl_s=200, batch_ttl_s=300, sweep_s=1.0)


@pytest.fixture
def blobs(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


@pytest.fixture
def files(client: aioredis.Redis) -> FileStore:
    return FileStore(client)


@pytest.fixture
def batches(client: aioredis.Redis) -> BatchStore:
    return BatchStore(client)


@pytest.fixture
def retention(client: aioredis.Redis, blobs: LocalBlobStore, files: FileStore, batches: BatchStore) -> Retention:
    return Retention(client, blobs, files, batches, POLICY, clock=lambda: 0.0)


async def stored_file(
    files: FileStore, blobs: LocalBlobStore, file_id: str, expires_at: float, team: str = "alpha"
) -> FileRecord:
    data = b'{"prompt": "x", "max_tokens": 1}\n'
    await blobs.put(f"files/{file_id}", data)
    return await files.create(
        team, "batch", f"{file_id}.jsonl", len(data), f"files/{file_id}",
        file_id=file_id, now=0.0, expires_at=expires_at,
    )  # fmt: skip


async def batch(batches: BatchStore, batch_id: str, status: BatchStatus, **fields: Any) -> BatchRecord:
    record = BatchRecord(
        batch_id, "alpha", "small", "openai", "/v1/completions", "files/file-in", "file-in", "in.jsonl",
        status, 0.0, 50.0, total=1, **fields,
    )  # fmt: skip
    await batches.create(record)
    return record


def blob_files(blobs: LocalBlobStore) -> list[str]:
    """Every file under the blob root, temp files included."""
    return sorted(str(p.relative_to(blobs.root)) for p in blobs.root.rglob("*") if p.is_file())


async def storage(client: aioredis.Redis) -> int:
    return int(await client.get(storage_key("alpha")) or 0)


async def test_an_expired_file_goes_and_one_not_yet_due_stays(
    retention: Retention, files: FileStore, blobs: LocalBlobStore, client: aioredis.Redis
) -> None:
    await stored_file(files, blobs, "file-old", expires_at=10.0)
    kept = await stored_file(files, blobs, "file-new", expires_at=30.0)
    assert await storage(client) == 2 * kept.bytes
    assert await retention.sweep(now=9.0) == SweepReport()
    assert await retention.sweep(now=10.0) == SweepReport(files=1)
    assert await files.get("file-old") is None
    assert [f.file_id for f in await files.list_for_team("alpha")] == ["file-new"]
    assert blob_files(blobs) == ["files/file-new"]
    assert await storage(client) == kept.bytes
    assert await client.zrange(EXPIRY_KEY, 0, -1) == [b"file|file-new|files/file-new"]


async def test_a_sweep_reads_only_what_is_due(
    retention: Retention, files: FileStore, blobs: LocalBlobStore, client: aioredis.Redis
) -> None:
    for index in range(2000):  # kept: records only, their bytes are not the point here
        await files.create("alpha", "batch", "k.jsonl", 1, f"files/file-k{index}", file_id=f"file-k{index}", now=0.0,
                           expires_at=1000.0 + index)  # fmt: skip
    for index in range(3):
        await stored_file(files, blobs, f"file-due{index}", expires_at=5.0)
    await client.config_resetstat()
    assert await retention.sweep(now=10.0) == SweepReport(files=3)
    stats = await client.info("commandstats")
    calls = sum(int(value["calls"]) for name, value in stats.items() if name != "cmdstat_info")
    assert calls < 40, stats  # ~8 commands an expired file; none for the 2,000 kept
    assert await client.zcard(EXPIRY_KEY) == 2000


async def test_a_file_a_running_batch_reads_keeps_its_bytes_until_the_batch_ends(
    retention: Retention, files: FileStore, batches: BatchStore, blobs: LocalBlobStore
) -> None:
    await stored_file(files, blobs, "file-in", expires_at=10.0)
    await files.add_user("file-in", "batch_run", until=50.0)
    await batch(batches, "batch_run", BatchStatus.IN_PROGRESS)
    assert await retention.sweep(now=20.0) == SweepReport(deferred=1)
    assert await files.get("file-in") is not None and blob_files(blobs) == ["files/file-in"]
    assert await retention.sweep(now=49.0) == SweepReport()  # put off to the batch's deadline
    await batches.transition(
        "batch_run", BatchStatus.COMPLETED, allowed_from=(BatchStatus.IN_PROGRESS,), stamp="finished_at", now=49.5
    )
    assert await retention.sweep(now=50.0) == SweepReport(files=1)
    assert await files.get("file-in") is None and blob_files(blobs) == []


async def test_deleting_a_file_in_use_removes_it_now_and_its_bytes_when_the_batch_ends(
    retention: Retention, files: FileStore, batches: BatchStore, blobs: LocalBlobStore, client: aioredis.Redis
) -> None:
    record = await stored_file(files, blobs, "file-in", expires_at=1000.0)
    await files.add_user("file-in", "batch_run", until=50.0)
    await batch(batches, "batch_run", BatchStatus.IN_PROGRESS)
    assert await retention.delete_file(record, now=5.0)
    assert not await retention.delete_file(record, now=5.0)  # a second delete finds nothing
    assert await files.get("file-in") is None and await files.list_for_team("alpha") == []
    assert await storage(client) == 0
    assert blob_files(blobs) == ["files/file-in"]  # the running batch still reads it
    await batches.transition(
        "batch_run", BatchStatus.CANCELLED, allowed_from=(BatchStatus.IN_PROGRESS,), stamp="finished_at", now=20.0
    )
    assert await retention.sweep(now=60.0) == SweepReport(files=1)
    assert blob_files(blobs) == [] and await client.zcard(EXPIRY_KEY) == 0


async def test_a_batch_still_being_created_keeps_the_file_until_its_deadline(
    retention: Retention, files: FileStore, blobs: LocalBlobStore
) -> None:
    record = await stored_file(files, blobs, "file-in", expires_at=1000.0)
    await files.add_user("file-in", "batch_new", until=50.0)  # registered, record not written yet
    assert await retention.delete_file(record, now=5.0)
    assert blob_files(blobs) == ["files/file-in"]
    # Its creation failed and left no record: past the deadline nothing holds the bytes.
    assert await retention.sweep(now=51.0) == SweepReport(files=1)
    assert blob_files(blobs) == []


async def test_an_ended_batch_goes_with_what_it_stored_and_its_output_files_keep_their_own_time(
    retention: Retention, files: FileStore, batches: BatchStore, blobs: LocalBlobStore, client: aioredis.Redis
) -> None:
    await blobs.put(input_key("batch_n"), b'{"prompt": "x", "max_tokens": 1}\n')
    await blobs.put(invalid_key("batch_n"), b"{}\n")
    results = ResultStore(client, blobs)
    record = output_record("batch_n", 1, None, response={"status_code": 200})
    await results.write("batch_n", "seg-1", [EntryResult(1, Outcome.DONE, record)], now=1.0)
    await blobs.put("batches/batch_n/results.jsonl", b"{}\n")
    output = await files.create("alpha", "batch_output", "out.jsonl", 3, "batches/batch_n/results.jsonl",
                                file_id="file-n-output", now=40.0, expires_at=40.0 + 200)  # fmt: skip
    await batch(batches, "batch_n", BatchStatus.COMPLETED, input_bytes=33, output_file_id=output.file_id)
    await retention.schedule_batch("batch_n", ended_at=40.0)
    assert await storage(client) == 36
    assert await retention.sweep(now=239.0) == SweepReport()
    assert await retention.sweep(now=240.0) == SweepReport(files=1)  # the output file, on its own time
    assert await batches.get("batch_n") is not None
    assert blob_files(blobs) == ["batches/batch_n/input.jsonl", "batches/batch_n/invalid.jsonl",
                                 "batches/batch_n/segments/seg-1.jsonl"]  # fmt: skip
    assert await retention.sweep(now=339.0) == SweepReport()
    assert await retention.sweep(now=340.0) == SweepReport(batches=1)
    assert await batches.get("batch_n") is None and await batches.list_for_team("alpha") == []
    assert await client.keys("sy:batch:batch_n*") == []
    assert blob_files(blobs) == []
    assert list((blobs.root / "batches").iterdir()) == []  # no empty folder per batch either
    assert await storage(client) == 0
    assert await client.zcard(EXPIRY_KEY) == 0


async def test_only_one_sweeper_at_a_time(
    retention: Retention, files: FileStore, blobs: LocalBlobStore, client: aioredis.Redis
) -> None:
    await stored_file(files, blobs, "file-old", expires_at=1.0)
    await client.set("sy:expiry:sweeper", "1")  # another dispatcher is sweeping
    assert await retention.sweep(now=5.0) == SweepReport()
    await client.delete("sy:expiry:sweeper")
    assert await retention.sweep(now=5.0) == SweepReport(files=1)
