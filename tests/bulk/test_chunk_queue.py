"""ChunkQueue on a real Redis stream: each chunk goes to one dispatcher, an idle one is reclaimed
by another unless its holder touched it, an acknowledged one is gone, and a deleted stream reads
as empty. Idle times are a few tenths of a second so each test stays well under a second."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from bulk.chunk_queue import ChunkQueue, QueuedChunk, chunks_key
from bulk.ingest import ChunkRef

BATCH = "batch_q1"
IDLE_S = 0.2


def _chunks(count: int) -> list[ChunkRef]:
    """Chunks of 4 lines (100 bytes each), one invalid line in every other one."""
    return [
        ChunkRef(
            first_line=4 * i + 1,
            last_line=4 * i + 4,
            byte_start=400 * i,
            byte_end=400 * (i + 1),
            entries=4 - i % 2,
            cost_tokens=100 + i,
        )
        for i in range(count)
    ]


def _refs(queued: list[QueuedChunk]) -> list[ChunkRef]:
    return [q.chunk for q in queued]


async def test_chunk_fields_round_trip_exactly(client: aioredis.Redis) -> None:
    queue = ChunkQueue(client, "d1")
    big = ChunkRef(
        first_line=49_745, last_line=50_000, byte_start=2**40, byte_end=2**40 + 262_144, entries=0, cost_tokens=0
    )
    await queue.add(BATCH, [big])
    (queued,) = await queue.read(BATCH)
    assert queued.batch_id == BATCH
    assert queued.chunk == big
    assert await queue.drain(BATCH) == [queued]


async def test_each_chunk_is_delivered_once_across_consumers(client: aioredis.Redis) -> None:
    chunks = _chunks(3)
    first, second = ChunkQueue(client, "d1"), ChunkQueue(client, "d2")
    await first.add(BATCH, chunks)
    got_first = await first.read(BATCH, count=2)
    got_second = await second.read(BATCH, count=2)
    assert _refs(got_first) == chunks[:2]
    assert _refs(got_second) == chunks[2:]  # only what d1 did not take
    assert await first.read(BATCH) == []
    assert await second.read(BATCH) == []
    ids = [q.message_id for q in got_first + got_second]
    assert len(set(ids)) == 3
    assert [q.message_id for q in await first.drain(BATCH)] == ids  # delivered, not yet acknowledged


async def test_read_of_empty_queue_is_empty(client: aioredis.Redis) -> None:
    queue = ChunkQueue(client, "d1")
    await queue.add(BATCH, [])
    assert await queue.read(BATCH) == []
    assert await queue.remaining(BATCH) == 0


async def test_idle_chunk_is_reclaimed_by_another_consumer(client: aioredis.Redis) -> None:
    dead, alive = ChunkQueue(client, "dead"), ChunkQueue(client, "alive")
    await dead.add(BATCH, _chunks(2))
    (taken,) = await dead.read(BATCH)
    assert await alive.reclaim(BATCH, IDLE_S) == []  # not idle long enough yet
    await asyncio.sleep(IDLE_S + 0.05)
    assert await alive.reclaim(BATCH, IDLE_S) == [taken]  # same message, same chunk
    # Now the reclaimer's, and fresh: the dead one's own reclaim finds nothing.
    assert await dead.reclaim(BATCH, IDLE_S) == []
    pending = await client.xpending_range(chunks_key(BATCH), "dispatchers", "-", "+", 10)
    assert [(p["message_id"].decode(), p["consumer"].decode()) for p in pending] == [(taken.message_id, "alive")]


async def test_reclaim_never_hands_out_undelivered_chunks(client: aioredis.Redis) -> None:
    queue, other = ChunkQueue(client, "d1"), ChunkQueue(client, "d2")
    await queue.add(BATCH, _chunks(2))
    await asyncio.sleep(IDLE_S + 0.05)
    assert await other.reclaim(BATCH, IDLE_S) == []  # queued, never read: read() hands those out
    assert _refs(await other.read(BATCH, count=5)) == _chunks(2)


async def test_touched_chunk_is_not_reclaimed(client: aioredis.Redis) -> None:
    holder, other = ChunkQueue(client, "holder"), ChunkQueue(client, "other")
    await holder.add(BATCH, _chunks(2))
    held = await holder.read(BATCH, count=2)
    await asyncio.sleep(0.15)
    await holder.touch(BATCH, [held[0].message_id])
    await asyncio.sleep(0.1)  # first: 0.1 s since the touch; second: 0.25 s idle
    assert await other.reclaim(BATCH, IDLE_S) == [held[1]]
    await asyncio.sleep(0.15)  # first: 0.25 s since the touch, untouched since
    assert await other.reclaim(BATCH, IDLE_S) == [held[0]]


async def test_touch_of_nothing_is_a_no_op(client: aioredis.Redis) -> None:
    queue = ChunkQueue(client, "d1")
    await queue.touch(BATCH, [])  # no stream, no ids: no error
    assert await client.exists(chunks_key(BATCH)) == 0


async def test_ack_removes_the_chunk(client: aioredis.Redis) -> None:
    holder, other = ChunkQueue(client, "holder"), ChunkQueue(client, "other")
    chunks = _chunks(3)
    await holder.add(BATCH, chunks)
    first, second = await holder.read(BATCH, count=2)
    assert await holder.remaining(BATCH) == 3
    await holder.ack(BATCH, first.message_id)
    assert await holder.remaining(BATCH) == 2
    assert _refs(await holder.drain(BATCH)) == chunks[1:]  # held (second) and queued (third)
    await asyncio.sleep(IDLE_S + 0.05)
    assert await other.reclaim(BATCH, IDLE_S) == [second]  # not the acknowledged one
    await other.ack(BATCH, second.message_id)
    assert _refs(await other.drain(BATCH)) == chunks[2:]
    assert await other.remaining(BATCH) == 1


async def test_deleted_stream_reads_as_empty(client: aioredis.Redis) -> None:
    queue = ChunkQueue(client, "d1")
    await queue.add(BATCH, _chunks(2))
    await queue.read(BATCH)
    await queue.delete(BATCH)
    assert await client.exists(chunks_key(BATCH)) == 0
    assert await queue.read(BATCH) == []  # NOGROUP: the batch ended
    assert await queue.reclaim(BATCH, 0.0) == []
    assert await queue.remaining(BATCH) == 0
    assert await queue.drain(BATCH) == []


async def test_queues_of_two_batches_are_separate(client: aioredis.Redis) -> None:
    queue = ChunkQueue(client, "d1")
    await queue.add("batch_a", _chunks(1))
    await queue.add("batch_b", _chunks(2)[1:])
    (a,) = await queue.read("batch_a", count=5)
    (b,) = await queue.read("batch_b", count=5)
    assert (a.batch_id, a.chunk) == ("batch_a", _chunks(1)[0])
    assert (b.batch_id, b.chunk) == ("batch_b", _chunks(2)[1])


async def test_idle_chunk_behind_many_fresh_ones_is_reclaimed(client: aioredis.Redis) -> None:
    busy, dead, other = ChunkQueue(client, "busy"), ChunkQueue(client, "dead"), ChunkQueue(client, "other")
    await busy.add(BATCH, _chunks(161))
    held = await busy.read(BATCH, count=160)
    (lost,) = await dead.read(BATCH)
    await asyncio.sleep(IDLE_S + 0.05)
    await busy.touch(BATCH, [q.message_id for q in held])  # alive: its 160 chunks are fresh
    reclaimed = [q for _ in range(3) for q in await other.reclaim(BATCH, IDLE_S)]
    assert reclaimed == [lost]
