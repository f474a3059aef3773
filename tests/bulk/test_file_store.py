"""FileStore on a real Redis: records round-trip, another team's file is absent, lists are
newest first and bounded."""

from __future__ import annotations

import re
import time

import pytest
import redis.asyncio as aioredis

from bulk.file_store import FileRecord, FileStore, new_file_id, uploaded_file_key


@pytest.fixture
def files(client: aioredis.Redis) -> FileStore:
    return FileStore(client)


def test_new_file_ids_are_distinct_and_openai_shaped() -> None:
    ids = {new_file_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"file-[0-9a-f]{24}", file_id) for file_id in ids)
    assert uploaded_file_key("file-abc") == "files/file-abc"


async def test_create_then_get_round_trips(files: FileStore, client: aioredis.Redis) -> None:
    created = await files.create(
        "alpha", "batch", "prompts.jsonl", 12_345, "files/file-abc", file_id="file-abc", now=1700000000.25
    )
    assert created == FileRecord("file-abc", "alpha", "batch", "prompts.jsonl", 12_345, 1700000000.25, "files/file-abc")
    assert await files.get_for_team("alpha", "file-abc") == created
    assert await client.zrange("sy:files:alpha", 0, -1, withscores=True) == [(b"file-abc", 1700000000.25)]


async def test_create_makes_an_id_and_takes_the_time_when_not_given(files: FileStore) -> None:
    before = time.time()
    created = await files.create("alpha", "batch_output", "out.jsonl", 0, "batches/b/results.jsonl")
    after = time.time()
    assert re.fullmatch(r"file-[0-9a-f]{24}", created.file_id)
    assert before <= created.created_at <= after
    assert await files.get_for_team("alpha", created.file_id) == created


async def test_time_zero_is_kept(files: FileStore) -> None:
    created = await files.create("alpha", "batch", "a.jsonl", 1, "files/file-a", file_id="file-a", now=0.0)
    assert created.created_at == 0.0
    got = await files.get_for_team("alpha", "file-a")
    assert got is not None
    assert got.created_at == 0.0


async def test_another_teams_file_is_as_good_as_absent(files: FileStore) -> None:
    await files.create("alpha", "batch", "a.jsonl", 1, "files/file-a", file_id="file-a", now=1.0)
    assert await files.get_for_team("beta", "file-a") is None
    assert await files.get_for_team("alpha", "file-missing") is None


async def test_list_is_newest_first_per_team_and_bounded(files: FileStore) -> None:
    for name, now in (("file-2", 2.0), ("file-1", 1.0), ("file-3", 3.0)):
        await files.create("alpha", "batch", f"{name}.jsonl", 10, f"files/{name}", file_id=name, now=now)
    await files.create("beta", "batch", "b.jsonl", 10, "files/file-b", file_id="file-b", now=2.5)
    assert [f.file_id for f in await files.list_for_team("alpha")] == ["file-3", "file-2", "file-1"]
    assert [f.file_id for f in await files.list_for_team("alpha", limit=2)] == ["file-3", "file-2"]
    assert await files.list_for_team("beta") == [
        FileRecord("file-b", "beta", "batch", "b.jsonl", 10, 2.5, "files/file-b")
    ]
    assert await files.list_for_team("gamma") == []


async def test_list_skips_ids_whose_record_is_gone(files: FileStore, client: aioredis.Redis) -> None:
    await files.create("alpha", "batch", "a.jsonl", 1, "files/file-a", file_id="file-a", now=1.0)
    await files.create("alpha", "batch", "b.jsonl", 1, "files/file-b", file_id="file-b", now=2.0)
    await client.delete("sy:file:file-b")
    assert [f.file_id for f in await files.list_for_team("alpha")] == ["file-a"]
