"""BatchStore on a real Redis: records round-trip, teams see only their own batches, pages are
newest first, the active set is ordered by deadline, and status moves only along allowed edges."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from bulk.batch_store import ACTIVE_KEY, BatchRecord, BatchStatus, BatchStore, batch_key, new_batch_id

ENDED = (BatchStatus.COMPLETED, BatchStatus.EXPIRED, BatchStatus.CANCELLED, BatchStatus.FAILED)


@pytest.fixture
def store(client: aioredis.Redis) -> BatchStore:
    return BatchStore(client)


def _record(
    batch_id: str,
    *,
    team_id: str = "alpha",
    created_at: float = 1000.0,
    deadline: float = 87400.0,
    status: BatchStatus = BatchStatus.IN_PROGRESS,
) -> BatchRecord:
    return BatchRecord(
        batch_id=batch_id,
        team_id=team_id,
        model_id="small",
        line_format="native",
        endpoint="/v1/generate",
        input_key=f"batches/{batch_id}/input.jsonl",
        input_file_id=None,
        filename="prompts.jsonl",
        status=status,
        created_at=created_at,
        deadline=deadline,
        total=10,
    )


async def _active_with_scores(client: aioredis.Redis) -> list[tuple[bytes, float]]:
    return list(await client.zrange(ACTIVE_KEY, 0, -1, withscores=True))


def test_new_batch_ids_are_distinct_and_openai_shaped() -> None:
    ids = {new_batch_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"batch_[0-9a-f]{24}", batch_id) for batch_id in ids)


def test_pending_and_finished_entries() -> None:
    record = replace(_record("batch_a"), total=10, done=4, failed=2, expired=1)
    assert (record.pending, record.finished_entries) == (3, 7)
    over = replace(record, done=9)  # more results than lines cannot make pending negative
    assert (over.pending, over.finished_entries) == (0, 12)


async def test_create_then_get_round_trips_every_field(store: BatchStore, client: aioredis.Redis) -> None:
    record = replace(
        _record("batch_a", created_at=1234.5, deadline=5678.25),
        input_file_id="file-abc",
        line_format="openai",
        endpoint="/v1/chat/completions",
        total=7,
        invalid=2,
        failed=2,
        metadata={"project": "eval", "owner": "ana"},
    )
    await store.create(record)
    assert await store.get("batch_a") == record
    assert await client.zrange("sy:batches:alpha", 0, -1, withscores=True) == [(b"batch_a", 1234.5)]
    assert await _active_with_scores(client) == [(b"batch_a", 5678.25)]


async def test_record_without_input_file_reads_back_none(store: BatchStore, client: aioredis.Redis) -> None:
    await store.create(_record("batch_a"))
    assert await client.hexists(batch_key("batch_a"), "input_file_id") == 0
    got = await store.get("batch_a")
    assert got is not None
    assert got.input_file_id is None
    assert (got.started_at, got.finalizing_at, got.finished_at, got.cancelling_at) == (None, None, None, None)
    assert (got.at_risk, got.output_file_id, got.error_file_id, got.metadata) == (False, None, None, {})


async def test_get_of_unknown_batch_is_none(store: BatchStore) -> None:
    assert await store.get("batch_missing") is None


async def test_another_teams_batch_is_as_good_as_absent(store: BatchStore) -> None:
    record = _record("batch_a", team_id="alpha")
    await store.create(record)
    assert await store.get_for_team("alpha", "batch_a") == record
    assert await store.get_for_team("beta", "batch_a") is None
    assert await store.get_for_team("alpha", "batch_missing") is None


async def test_list_is_newest_first_and_pages_with_after(store: BatchStore) -> None:
    # Created out of order; ordered by created_at, not by insertion or id.
    for number, created_at in ((3, 300.0), (1, 100.0), (5, 500.0), (2, 200.0), (4, 400.0)):
        await store.create(_record(f"batch_{number}", created_at=created_at))
    await store.create(_record("batch_beta", team_id="beta", created_at=450.0))

    async def page(after: str | None) -> list[str]:
        return [r.batch_id for r in await store.list_for_team("alpha", limit=2, after=after)]

    assert await page(None) == ["batch_5", "batch_4"]
    assert await page("batch_4") == ["batch_3", "batch_2"]
    assert await page("batch_2") == ["batch_1"]
    assert await page("batch_1") == []
    assert [r.batch_id for r in await store.list_for_team("alpha")] == [f"batch_{n}" for n in (5, 4, 3, 2, 1)]
    assert [r.batch_id for r in await store.list_for_team("beta")] == ["batch_beta"]
    assert await store.list_for_team("gamma") == []


async def test_active_ids_are_earliest_deadline_first(store: BatchStore) -> None:
    await store.create(_record("batch_late", created_at=1.0, deadline=300.0))
    await store.create(_record("batch_soon", created_at=2.0, deadline=100.0))
    await store.create(_record("batch_mid", created_at=3.0, deadline=200.0))
    await store.create(_record("batch_done", created_at=4.0, deadline=50.0, status=BatchStatus.COMPLETED))
    assert await store.active_ids() == ["batch_soon", "batch_mid", "batch_late"]
    # An ended batch is still the team's to list, just not worked on.
    listed = [r.batch_id for r in await store.list_for_team("alpha")]
    assert listed == ["batch_done", "batch_mid", "batch_soon", "batch_late"]


async def test_transition_moves_only_from_allowed_statuses(store: BatchStore) -> None:
    await store.create(_record("batch_a"))
    moved = await store.transition(
        "batch_a", BatchStatus.FINALIZING, allowed_from=(BatchStatus.CANCELLING,), stamp="finalizing_at", now=50.0
    )
    assert moved is False
    record = await store.get("batch_a")
    assert record is not None
    assert (record.status, record.finalizing_at) == (BatchStatus.IN_PROGRESS, None)

    moved = await store.transition(
        "batch_a",
        BatchStatus.CANCELLING,
        allowed_from=(BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS),
        stamp="cancelling_at",
        now=60.0,
    )
    assert moved is True
    record = await store.get("batch_a")
    assert record is not None
    assert (record.status, record.cancelling_at) == (BatchStatus.CANCELLING, 60.0)
    assert await store.active_ids() == ["batch_a"]  # cancelling is still worked on


async def test_transition_stamps_the_time_only_once(store: BatchStore) -> None:
    await store.create(_record("batch_a"))
    allowed = (BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING)
    assert await store.transition(
        "batch_a", BatchStatus.CANCELLING, allowed_from=allowed, stamp="cancelling_at", now=60.0
    )
    assert await store.transition(
        "batch_a", BatchStatus.CANCELLING, allowed_from=allowed, stamp="cancelling_at", now=90.0
    )
    record = await store.get("batch_a")
    assert record is not None
    assert (record.status, record.cancelling_at) == (BatchStatus.CANCELLING, 60.0)


async def test_transition_without_stamp_sets_no_time(store: BatchStore, client: aioredis.Redis) -> None:
    await store.create(_record("batch_a"))
    before = set(await client.hkeys(batch_key("batch_a")))
    assert await store.transition(
        "batch_a", BatchStatus.FINALIZING, allowed_from=(BatchStatus.IN_PROGRESS,), stamp=None, now=70.0
    )
    assert set(await client.hkeys(batch_key("batch_a"))) == before
    assert await client.hget(batch_key("batch_a"), "status") == b"finalizing"


@pytest.mark.parametrize("final", ENDED)
async def test_ended_status_leaves_the_active_set(
    store: BatchStore, client: aioredis.Redis, final: BatchStatus
) -> None:
    await store.create(_record("batch_a", created_at=2.0, deadline=100.0))
    await store.create(_record("batch_b", created_at=1.0, deadline=200.0))
    assert await store.transition(
        "batch_a", final, allowed_from=(BatchStatus.IN_PROGRESS,), stamp="finished_at", now=80.0
    )
    assert await _active_with_scores(client) == [(b"batch_b", 200.0)]
    record = await store.get("batch_a")
    assert record is not None
    assert (record.status, record.finished_at) == (final, 80.0)
    assert [r.batch_id for r in await store.list_for_team("alpha")] == ["batch_a", "batch_b"]


async def test_refused_transition_to_an_ended_status_stays_active(store: BatchStore) -> None:
    await store.create(_record("batch_a"))
    moved = await store.transition(
        "batch_a", BatchStatus.COMPLETED, allowed_from=(BatchStatus.FINALIZING,), stamp="finished_at", now=80.0
    )
    assert moved is False
    assert await store.active_ids() == ["batch_a"]
    record = await store.get("batch_a")
    assert record is not None
    assert (record.status, record.finished_at) == (BatchStatus.IN_PROGRESS, None)


async def test_transition_of_unknown_batch_is_refused_and_creates_nothing(
    store: BatchStore, client: aioredis.Redis
) -> None:
    moved = await store.transition(
        "batch_missing", BatchStatus.CANCELLING, allowed_from=tuple(BatchStatus), stamp="cancelling_at", now=1.0
    )
    assert moved is False
    assert await client.exists(batch_key("batch_missing")) == 0


async def test_set_fields_changes_only_those_fields(store: BatchStore) -> None:
    record = _record("batch_a")
    await store.create(record)
    await store.set_fields("batch_a", at_risk=1, output_file_id="file-out", error_file_id="file-err")
    assert await store.get("batch_a") == replace(
        record, at_risk=True, output_file_id="file-out", error_file_id="file-err"
    )
    await store.set_fields("batch_a", at_risk=0)
    got = await store.get("batch_a")
    assert got is not None
    assert (got.at_risk, got.output_file_id) == (False, "file-out")


async def test_mark_started_keeps_the_first_time(store: BatchStore) -> None:
    await store.create(_record("batch_a"))
    await store.mark_started("batch_a", 10.0)
    await store.mark_started("batch_a", 20.0)
    record = await store.get("batch_a")
    assert record is not None
    assert record.started_at == 10.0
