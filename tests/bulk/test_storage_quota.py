"""StorageQuota on a real Redis: limits per team with a default, reservations that refuse past
the limit with used/limit in the message, release, and a metered stream that reserves ahead."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bulk.batch_store import BatchRecord, BatchStatus, BatchStore
from bulk.file_store import FileStore
from bulk.ingest import IngestRefused
from bulk.storage_quota import RESERVE_STEP_BYTES, StorageQuota, StorageQuotaExceeded, storage_key
from config.settings import SwitchyardConfig

MIB = 1 << 20


@pytest.fixture
def quota(client: aioredis.Redis) -> StorageQuota:
    config = SwitchyardConfig(
        root=Path("."),
        models={},
        pools={},
        teams={"alpha": {}, "beta": {"storage_bytes": 20 * MIB}},  # type: ignore[dict-item]
        bulk={"team_storage_bytes": 10 * MIB},  # type: ignore[arg-type]
    )
    return StorageQuota(config, client)


async def used(client: aioredis.Redis, team: str) -> int:
    return int(await client.get(storage_key(team)) or 0)


def test_limits_come_from_the_team_else_the_default(quota: StorageQuota) -> None:
    assert quota.limit("alpha") == 10 * MIB
    assert quota.limit("beta") == 20 * MIB
    assert quota.limit("unknown") == 10 * MIB


async def test_a_reservation_past_the_limit_is_refused_with_used_and_limit(
    quota: StorageQuota, client: aioredis.Redis
) -> None:
    first = quota.reservation("alpha")
    await first.reserve(6 * MIB)
    second = quota.reservation("alpha")
    with pytest.raises(StorageQuotaExceeded) as refused:
        await second.reserve(5 * MIB)
    assert isinstance(refused.value, IngestRefused) and refused.value.status == 413
    assert (refused.value.used, refused.value.wanted, refused.value.limit) == (6 * MIB, 5 * MIB, 10 * MIB)
    assert "stores 6.0 MiB of its 10.0 MiB limit" in refused.value.message
    assert "needs 5.0 MiB more" in refused.value.message
    assert await used(client, "alpha") == 6 * MIB  # the refused one holds nothing
    await second.reserve(4 * MIB)  # what fits still fits
    await first.release()
    await first.release()  # twice gives back once
    assert await used(client, "alpha") == 4 * MIB
    assert (await quota.usage("alpha")).used_bytes == 4 * MIB
    assert await used(client, "beta") == 0


async def test_metered_reserves_ahead_and_exactly_near_the_limit(quota: StorageQuota, client: aioredis.Redis) -> None:
    async def pieces(count: int, size: int) -> AsyncIterator[bytes]:
        for _ in range(count):
            yield b"x" * size

    reservation = quota.reservation("alpha")
    seen = [len(piece) async for piece in reservation.metered(pieces(3, MIB))]
    assert seen == [MIB] * 3
    assert reservation.reserved == MIB + RESERVE_STEP_BYTES  # one step ahead, not one call a piece
    await reservation.release()

    # 9.5 MiB of a 10 MiB quota: a step ahead does not fit, the bytes themselves do.
    close = quota.reservation("alpha")
    assert [len(p) async for p in close.metered(pieces(19, MIB // 2))] == [MIB // 2] * 19
    assert close.reserved == 19 * MIB // 2
    with pytest.raises(StorageQuotaExceeded):
        async for _ in close.metered(pieces(21, MIB // 2)):
            pass
    await close.release()
    assert await used(client, "alpha") == 0


async def test_records_take_reservations_over_and_deletes_give_bytes_back(
    quota: StorageQuota, client: aioredis.Redis
) -> None:
    files, batches = FileStore(client), BatchStore(client)
    reservation = quota.reservation("alpha")
    await reservation.reserve(5000)
    record = await files.create("alpha", "batch", "a.jsonl", 1234, "files/file-a", file_id="file-a", reserved=5000)
    assert await used(client, "alpha") == 1234
    # Written again (a finalizer that ran twice): counted once.
    await files.create("alpha", "batch", "a.jsonl", 1234, "files/file-a", file_id="file-a")
    assert await used(client, "alpha") == 1234
    batch = BatchRecord(
        "batch_q", "alpha", "small", "native", "/v1/generate", "batches/batch_q/input.jsonl", None, "in.jsonl",
        BatchStatus.COMPLETED, 1.0, 2.0, total=1, input_bytes=700,
    )  # fmt: skip
    await batches.create(batch)
    assert await used(client, "alpha") == 1934
    assert await files.delete(record) and not await files.delete(record)
    assert await batches.delete(batch) and not await batches.delete(batch)
    assert await used(client, "alpha") == 0
