"""ResultStore on a real Redis and a real LocalBlobStore: each line is marked once however many
writers ran it, only the marked copy is read, unmarked segments are never read, the batch turns
`finalizing` when its last entry ends, and compaction writes the same two files every time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bulk.batch_store import BatchRecord, BatchStatus, BatchStore
from bulk.blob_store import BlobNotFound, LocalBlobStore
from bulk.results import (
    EntryResult,
    Marked,
    Outcome,
    ResultStore,
    errors_key,
    input_key,
    invalid_key,
    output_record,
    results_key,
)
from config.redis_errors import NotReplicated
from config.replica_acks import ReplicaAcks

BATCH = "batch_r1"
ALL = frozenset(Outcome)


@pytest.fixture
def blobs(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path)


@pytest.fixture
def store(client: aioredis.Redis, blobs: LocalBlobStore) -> ResultStore:
    return ResultStore(client, blobs)


@pytest.fixture
def batches(client: aioredis.Redis) -> BatchStore:
    return BatchStore(client)


async def _create(
    batches: BatchStore,
    total: int,
    *,
    status: BatchStatus = BatchStatus.IN_PROGRESS,
    done: int = 0,
    invalid: int = 0,
) -> None:
    await batches.create(
        BatchRecord(
            batch_id=BATCH,
            team_id="alpha",
            model_id="small",
            line_format="native",
            endpoint="/v1/generate",
            input_key=input_key(BATCH),
            input_file_id=None,
            filename="in.jsonl",
            status=status,
            created_at=1.0,
            deadline=1000.0,
            total=total,
            invalid=invalid,
            done=done,
            failed=invalid,
        )
    )


async def _get(batches: BatchStore) -> BatchRecord:
    record = await batches.get(BATCH)
    assert record is not None
    return record


def _result(line: int, outcome: Outcome, by: str) -> EntryResult:
    """A result whose record says which writer produced it."""
    return EntryResult(line, outcome, {"line": line, "by": by})


async def _read(store: ResultStore, outcomes: Iterable[Outcome]) -> list[dict[str, Any]]:
    data = b"".join([block async for block in store.read(BATCH, frozenset(outcomes))])
    assert data == b"" or data.endswith(b"\n")
    return sorted((json.loads(line) for line in data.splitlines()), key=lambda r: (r["line"], r["by"]))


def _segment_files(root: Path) -> list[str]:
    folder = root / "batches" / BATCH / "segments"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_output_record_is_openai_shaped() -> None:
    response = {"status_code": 200, "request_id": "r", "body": {"text": "hi"}}
    assert output_record("batch_abc", 7, "q7", response=response) == {
        "id": "batch_req_abc_7",
        "custom_id": "q7",
        "line": 7,
        "response": response,
        "error": None,
    }
    assert output_record("batch_abc", 8, None, error={"code": "c", "message": "m"}) == {
        "id": "batch_req_abc_8",
        "custom_id": None,
        "line": 8,
        "response": None,
        "error": {"code": "c", "message": "m"},
    }


async def test_each_line_is_marked_once_across_writers(store: ResultStore, batches: BatchStore, tmp_path: Path) -> None:
    await _create(batches, total=10)
    first = await store.write(
        BATCH,
        "a-1",
        [_result(1, Outcome.DONE, "a"), _result(2, Outcome.DONE, "a"), _result(3, Outcome.FAILED, "a")],
        5.0,
    )
    assert first == Marked(frozenset({1, 2, 3}), finalizing=False)
    # A slow writer that ran lines 2 and 3 too (as reclaimed): only line 4 is new.
    second = await store.write(
        BATCH,
        "b-1",
        [_result(2, Outcome.DONE, "b"), _result(3, Outcome.EXPIRED, "b"), _result(4, Outcome.DONE, "b")],
        6.0,
    )
    assert second == Marked(frozenset({4}), finalizing=False)
    record = await _get(batches)
    assert (record.done, record.failed, record.expired) == (3, 1, 0)
    assert await store.marked(BATCH, [1, 2, 3, 4, 5]) == {1, 2, 3, 4}
    assert await store.marked(BATCH, []) == set()
    assert _segment_files(tmp_path) == ["a-1.jsonl", "b-1.jsonl"]  # both written, one read per line


async def test_a_write_that_marks_nothing_new_lists_no_segment(
    store: ResultStore, batches: BatchStore, client: aioredis.Redis
) -> None:
    await _create(batches, total=10)
    await store.write(BATCH, "a-1", [_result(1, Outcome.DONE, "a")], 5.0)
    assert await store.write(BATCH, "b-1", [_result(1, Outcome.DONE, "b")], 6.0) == Marked(frozenset(), False)
    assert await client.lrange(f"sy:batch:{BATCH}:segments", 0, -1) == [b"a-1"]
    assert (await _get(batches)).done == 1


async def test_read_returns_only_the_marked_copy_by_outcome(store: ResultStore, batches: BatchStore) -> None:
    await _create(batches, total=10)
    await store.write(
        BATCH,
        "a-1",
        [_result(1, Outcome.DONE, "a"), _result(2, Outcome.DONE, "a"), _result(3, Outcome.FAILED, "a")],
        5.0,
    )
    await store.write(
        BATCH,
        "b-1",
        [_result(2, Outcome.DONE, "b"), _result(3, Outcome.EXPIRED, "b"), _result(4, Outcome.DONE, "b")],
        6.0,
    )
    await store.write(BATCH, "a-2", [_result(5, Outcome.EXPIRED, "a")], 7.0)
    assert await _read(store, [Outcome.DONE]) == [
        {"line": 1, "by": "a"},
        {"line": 2, "by": "a"},
        {"line": 4, "by": "b"},
    ]
    assert await _read(store, [Outcome.FAILED]) == [{"line": 3, "by": "a"}]
    assert await _read(store, [Outcome.EXPIRED]) == [{"line": 5, "by": "a"}]  # b's expired line 3 is a's
    assert [r["line"] for r in await _read(store, ALL)] == [1, 2, 3, 4, 5]


async def test_read_of_a_batch_without_results_is_empty(store: ResultStore) -> None:
    assert await _read(store, ALL) == []


class SmallReadBlobStore(LocalBlobStore):
    """A LocalBlobStore that reads in 7-byte pieces, so lines straddle pieces."""

    def read(self, key: str, chunk_bytes: int = 1 << 20) -> AsyncIterator[bytes]:
        return super().read(key, chunk_bytes=7)


async def test_read_joins_lines_split_across_pieces(
    client: aioredis.Redis, batches: BatchStore, tmp_path: Path
) -> None:
    store = ResultStore(client, SmallReadBlobStore(tmp_path))
    await _create(batches, total=10)
    await store.write(BATCH, "a-1", [_result(n, Outcome.DONE, "a" * n) for n in range(1, 6)], 5.0)
    assert await _read(store, ALL) == [{"line": n, "by": "a" * n} for n in range(1, 6)]


async def test_segment_never_marked_is_never_read(
    store: ResultStore, blobs: LocalBlobStore, batches: BatchStore
) -> None:
    await _create(batches, total=10)
    # A writer that stored its segment and died before marking it.
    crashed = b'5\tdone\t{"line": 5, "by": "dead"}\n6\tfailed\t{"line": 6, "by": "dead"}\n'
    await blobs.put(f"batches/{BATCH}/segments/dead-1.jsonl", crashed)
    await store.write(BATCH, "live-1", [_result(1, Outcome.DONE, "live")], 5.0)
    assert await _read(store, ALL) == [{"line": 1, "by": "live"}]
    assert await store.marked(BATCH, [5, 6]) == set()  # so whoever reclaims them runs them again
    assert await store.write(BATCH, "live-2", [_result(5, Outcome.DONE, "live")], 6.0) == Marked(frozenset({5}), False)
    assert await _read(store, ALL) == [{"line": 1, "by": "live"}, {"line": 5, "by": "live"}]
    record = await _get(batches)
    assert (record.done, record.failed) == (2, 0)


@pytest.mark.parametrize("status", [BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING])
async def test_last_result_turns_the_batch_finalizing(
    store: ResultStore, batches: BatchStore, status: BatchStatus
) -> None:
    await _create(batches, total=4, invalid=1, status=status)  # line 2 refused at upload: failed already
    assert await store.write(BATCH, "a-1", [_result(1, Outcome.DONE, "a")], 5.0) == Marked(frozenset({1}), False)
    assert await store.write(BATCH, "a-2", [_result(3, Outcome.EXPIRED, "a")], 6.0) == Marked(frozenset({3}), False)
    assert (await _get(batches)).status is status
    assert await store.write(BATCH, "a-3", [_result(4, Outcome.FAILED, "a")], 7.0) == Marked(frozenset({4}), True)
    record = await _get(batches)
    assert (record.status, record.finalizing_at) == (BatchStatus.FINALIZING, 7.0)
    assert (record.done, record.failed, record.expired, record.pending) == (1, 2, 1, 0)
    # A late duplicate, or a settle: the batch is already finalizing, nothing flips again.
    assert await store.write(BATCH, "b-1", [_result(4, Outcome.DONE, "b")], 8.0) == Marked(frozenset(), False)
    assert await store.settle(BATCH, 9.0) is False
    record = await _get(batches)
    assert (record.status, record.finalizing_at, record.done) == (BatchStatus.FINALIZING, 7.0, 1)


@pytest.mark.parametrize(
    "status",
    [BatchStatus.VALIDATING, BatchStatus.COMPLETED, BatchStatus.EXPIRED, BatchStatus.CANCELLED, BatchStatus.FAILED],
)
async def test_other_statuses_never_turn_finalizing(
    store: ResultStore, batches: BatchStore, status: BatchStatus
) -> None:
    await _create(batches, total=1, status=status)
    assert await store.write(BATCH, "a-1", [_result(1, Outcome.DONE, "a")], 5.0) == Marked(frozenset({1}), False)
    record = await _get(batches)
    assert (record.status, record.finalizing_at, record.done) == (status, None, 1)


async def test_settle_turns_an_ended_batch_finalizing_once(
    store: ResultStore, batches: BatchStore, client: aioredis.Redis
) -> None:
    await _create(batches, total=2, done=2)  # every entry ended, say before a cancellation landed
    assert await store.settle(BATCH, 5.0) is True
    assert await store.settle(BATCH, 6.0) is False
    record = await _get(batches)
    assert (record.status, record.finalizing_at) == (BatchStatus.FINALIZING, 5.0)
    assert await client.exists(f"sy:batch:{BATCH}:segments", f"sy:batch:{BATCH}:marks") == 0


async def test_settle_of_a_batch_with_pending_entries_changes_nothing(store: ResultStore, batches: BatchStore) -> None:
    await _create(batches, total=3, done=2)
    assert await store.settle(BATCH, 5.0) is False
    record = await _get(batches)
    assert (record.status, record.finalizing_at) == (BatchStatus.IN_PROGRESS, None)


async def test_settle_of_unknown_batch_is_false(store: ResultStore, client: aioredis.Redis) -> None:
    assert await store.settle("batch_missing", 5.0) is False
    assert await client.exists("sy:batch:batch_missing") == 0


def _jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


async def _compact(store: ResultStore, blobs: LocalBlobStore) -> tuple[tuple[int, int], bytes, bytes]:
    sizes = await store.compact(BATCH, blobs.open_writer(results_key(BATCH)), blobs.open_writer(errors_key(BATCH)))
    results = b"".join([b async for b in blobs.read(results_key(BATCH))])
    errors = b"".join([b async for b in blobs.read(errors_key(BATCH))])
    return sizes, results, errors


def _records(data: bytes) -> list[dict[str, Any]]:
    return sorted((json.loads(line) for line in data.splitlines()), key=lambda r: (r["line"], r["by"]))


async def _write_mixed(store: ResultStore) -> None:
    await store.write(
        BATCH,
        "a-1",
        [_result(1, Outcome.DONE, "a"), _result(3, Outcome.FAILED, "a"), _result(5, Outcome.DONE, "a")],
        5.0,
    )
    await store.write(BATCH, "b-1", [_result(3, Outcome.DONE, "b"), _result(6, Outcome.EXPIRED, "b")], 6.0)


async def test_compact_writes_results_and_errors_with_refusals_first(
    store: ResultStore, blobs: LocalBlobStore, batches: BatchStore
) -> None:
    await _create(batches, total=6, invalid=2)
    invalid = _jsonl({"line": 2, "by": "upload"}, {"line": 4, "by": "upload"})
    await blobs.put(invalid_key(BATCH), invalid)
    await _write_mixed(store)
    sizes, results, errors = await _compact(store, blobs)
    assert sizes == (len(results), len(errors))
    assert _records(results) == [{"line": 1, "by": "a"}, {"line": 5, "by": "a"}]
    assert errors.startswith(invalid)
    assert _records(errors[len(invalid) :]) == [{"line": 3, "by": "a"}, {"line": 6, "by": "b"}]
    # Again (a finalizer that crashed after compacting): the very same files.
    assert await _compact(store, blobs) == (sizes, results, errors)


async def test_compact_without_refusals_writes_only_entry_errors(
    store: ResultStore, blobs: LocalBlobStore, batches: BatchStore
) -> None:
    await _create(batches, total=6)
    await _write_mixed(store)
    sizes, results, errors = await _compact(store, blobs)
    assert sizes == (len(results), len(errors))
    assert _records(errors) == [{"line": 3, "by": "a"}, {"line": 6, "by": "b"}]


async def test_compact_of_all_done_batch_writes_an_empty_errors_file(
    store: ResultStore, blobs: LocalBlobStore, batches: BatchStore
) -> None:
    await _create(batches, total=1)
    await store.write(BATCH, "a-1", [_result(1, Outcome.DONE, "a")], 5.0)
    sizes, results, errors = await _compact(store, blobs)
    assert sizes == (len(results), 0)
    assert (_records(results), errors) == ([{"line": 1, "by": "a"}], b"")


async def test_compact_that_fails_leaves_neither_file(
    store: ResultStore, blobs: LocalBlobStore, batches: BatchStore, tmp_path: Path
) -> None:
    await _create(batches, total=6)
    await _write_mixed(store)
    (tmp_path / "batches" / BATCH / "segments" / "b-1.jsonl").unlink()  # a listed segment went missing
    with pytest.raises(BlobNotFound):
        await store.compact(BATCH, blobs.open_writer(results_key(BATCH)), blobs.open_writer(errors_key(BATCH)))
    assert await blobs.size(results_key(BATCH)) is None
    assert await blobs.size(errors_key(BATCH)) is None
    leftovers = [p.name for p in (tmp_path / "batches" / BATCH).iterdir() if p.is_file()]
    assert leftovers == []  # no temp files either


async def test_drop_segments_removes_marks_and_segment_blobs(
    store: ResultStore, blobs: LocalBlobStore, batches: BatchStore, client: aioredis.Redis, tmp_path: Path
) -> None:
    await _create(batches, total=6)
    await blobs.put(input_key(BATCH), b"{}\n")
    await _write_mixed(store)
    await _compact(store, blobs)
    await store.drop_segments(BATCH)
    assert await client.exists(f"sy:batch:{BATCH}:marks", f"sy:batch:{BATCH}:segments") == 0
    assert _segment_files(tmp_path) == []
    assert not (tmp_path / "batches" / BATCH / "segments").exists()
    assert await store.marked(BATCH, [1, 3, 5, 6]) == set()
    assert await _read(store, ALL) == []
    # The input and the compacted files stay, and so does the batch record with its counts.
    for key in (input_key(BATCH), results_key(BATCH), errors_key(BATCH)):
        assert await blobs.size(key) is not None
    assert (await _get(batches)).done == 2


async def test_a_mark_no_replica_holds_is_not_acknowledged(
    client: aioredis.Redis, blobs: LocalBlobStore, batches: BatchStore
) -> None:
    """In sentinel mode a mark waits for a replica: one a failover could drop raises
    NotReplicated (the dispatcher writes the results again and acks no chunk), so a line is
    never left unrun behind a chunk acknowledged on the strength of a lost mark. This Redis has
    no replica: every such mark is refused."""
    await _create(batches, total=2)
    durable = ResultStore(client, blobs, ReplicaAcks(1, 20))
    with pytest.raises(NotReplicated):
        await durable.write(BATCH, "a-1", [_result(1, Outcome.DONE, "a")], 5.0)
    # It ran on the primary all the same (NotReplicated is "not durable", not "not done"): with
    # no replica to wait for (one Redis, as `make up` runs it) the next mark counts, and ends
    # the batch.
    marked = await ResultStore(client, blobs).write(BATCH, "a-2", [_result(2, Outcome.DONE, "a")], 6.0)
    assert marked == Marked(frozenset({2}), finalizing=True)
