"""IdempotencyStore against a real redis-server: one generation per (team, request id), and
what it keeps (nothing per delta unless another process follows)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from contracts.generation import GenerationDelta, Logprobs
from serving.idempotency import ClaimState, IdempotencyStore, RecordGone, StoredDelta, fingerprint


async def test_claims_new_then_running_then_done_and_conflict(redis_url: str) -> None:
    store = IdempotencyStore(aioredis.Redis.from_url(redis_url))
    body = fingerprint({"model": "small", "prompt": "hi", "max_tokens": 5})
    assert (await store.claim("a", "r1", body)).state is ClaimState.NEW
    assert (await store.claim("a", "r1", body)).state is ClaimState.RUNNING
    assert (await store.claim("a", "r1", fingerprint({"prompt": "other"}))).state is ClaimState.CONFLICT
    # Scoped to the team: another team's r1 is a different request.
    assert (await store.claim("b", "r1", body)).state is ClaimState.NEW
    await store.record_final("a", "r1", {"text": "hello", "stop_reason": "length"}, keep_s=3600, followed=False)
    done = await store.claim("a", "r1", body)
    assert done.state is ClaimState.DONE
    assert done.result == {"text": "hello", "stop_reason": "length"}


async def test_concurrent_claims_elect_exactly_one_generator(redis_url: str) -> None:
    clients = [IdempotencyStore(aioredis.Redis.from_url(redis_url)) for _ in range(4)]
    claims = await asyncio.gather(*(clients[i % 4].claim("t", "same", "fp") for i in range(40)))
    assert sum(c.state is ClaimState.NEW for c in claims) == 1
    assert sum(c.state is ClaimState.RUNNING for c in claims) == 39


async def test_follow_replays_then_streams_live_until_final(redis_url: str) -> None:
    store = IdempotencyStore(aioredis.Redis.from_url(redis_url))
    await store.claim("t", "r", "fp")
    await store.mirror("t", "r", [GenerationDelta("Hel", (1, 2))])
    seen: list[StoredDelta] = []

    async def reader() -> None:
        async for delta in store.follow("t", "r", idle_timeout_s=5):
            seen.append(delta)

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.1)
    await store.mirror("t", "r", [GenerationDelta("lo", (3,)), GenerationDelta("!", (4,))])
    await store.record_final("t", "r", {"stop_reason": "stop"}, keep_s=3600, followed=True)
    await asyncio.wait_for(task, 5)
    assert seen == [
        StoredDelta("Hel", (1, 2)),
        StoredDelta("lo", (3,)),
        StoredDelta("!", (4,)),
        StoredDelta(final={"stop_reason": "stop"}),
    ]


async def test_follow_gives_up_on_a_stream_whose_owner_died(redis_url: str) -> None:
    store = IdempotencyStore(aioredis.Redis.from_url(redis_url))
    await store.claim("t", "orphan", "fp")
    await store.mirror("t", "orphan", [GenerationDelta("x", (1,))])
    with pytest.raises(TimeoutError):
        async for _ in store.follow("t", "orphan", idle_timeout_s=0.3):
            pass


async def test_forget_lets_a_refused_request_be_retried(redis_url: str) -> None:
    store = IdempotencyStore(aioredis.Redis.from_url(redis_url))
    await store.claim("t", "r", "fp")
    await store.forget("t", "r")
    assert (await store.claim("t", "r", "fp")).state is ClaimState.NEW


async def test_follow_waits_longer_than_the_clients_socket_timeout(redis_url: str) -> None:
    # The gateway's client gives up on a read after 2 s; a generation may well pause that long
    # (a long prefill) while a repeat on another process follows it.
    client = aioredis.Redis.from_url(redis_url, socket_timeout=0.5, retry_on_timeout=False)
    store = IdempotencyStore(client)
    await store.claim("t", "slow", "fp")

    async def owner() -> None:
        await asyncio.sleep(1.1)  # more than twice the socket timeout
        await store.mirror("t", "slow", [GenerationDelta("late", (1,))])
        await store.record_final("t", "slow", {"stop_reason": "stop"}, keep_s=3600, followed=True)

    writing = asyncio.create_task(owner())
    seen = [delta async for delta in store.follow("t", "slow", idle_timeout_s=5)]
    await writing
    assert seen == [StoredDelta("late", (1,)), StoredDelta(final={"stop_reason": "stop"})]
    await client.aclose()


async def test_a_request_nobody_followed_reads_from_its_stored_result(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    store = IdempotencyStore(client)
    await store.claim("t", "quiet", "fp")
    result = {"stop_reason": "length", "deltas": [["Hi", [1]]]}
    await store.record_final("t", "quiet", result, keep_s=3600, followed=False)
    assert await client.exists("sy:req-deltas:t:quiet") == 0  # no stream for nobody
    seen = [delta async for delta in store.follow("t", "quiet", idle_timeout_s=5)]
    assert seen == [StoredDelta(final=result)]


async def test_without_a_caller_id_nothing_is_kept_after_the_end(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    store = IdempotencyStore(client, follow_grace_s=1)
    await store.claim("t", "generated", "fp")
    await store.record_final("t", "generated", {"stop_reason": "stop"}, keep_s=None, followed=False)
    assert await client.keys("sy:req:t:generated*") == []
    with pytest.raises(RecordGone):
        async for _ in store.follow("t", "generated", idle_timeout_s=5):
            pass
    # Followed from another process: its stream ends them, then goes too.
    await store.claim("t", "cancelled", "fp")
    await store.record_final("t", "cancelled", {"stop_reason": "cancelled"}, keep_s=None, followed=True)
    assert await client.keys("sy:req-deltas:t:cancelled*") == [b"sy:req-deltas:t:cancelled"]
    assert 0 < await client.ttl("sy:req-deltas:t:cancelled") <= 1


async def test_a_follower_asks_the_owner_again_until_something_arrives(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url, socket_timeout=0.4)  # quiet slices of 0.2 s
    store = IdempotencyStore(client)
    await store.claim("t", "late", "fp")
    asks: list[float] = []

    async def nudge() -> None:
        asks.append(asyncio.get_running_loop().time())
        if len(asks) == 3:  # the owner hears the third ask
            await store.mirror("t", "late", [GenerationDelta("a", (1,))])
            await store.record_final("t", "late", {"stop_reason": "stop"}, keep_s=3600, followed=True)

    seen = [delta async for delta in store.follow("t", "late", idle_timeout_s=10, nudge=nudge)]
    assert seen == [StoredDelta("a", (1,)), StoredDelta(final={"stop_reason": "stop"})]
    assert len(asks) == 3


async def test_no_request_id_names_another_requests_keys(redis_url: str) -> None:
    """`r:deltas` is a valid request id; it once named the deltas stream of `r` (a WRONGTYPE 500)."""
    store = IdempotencyStore(aioredis.Redis.from_url(redis_url))
    await store.claim("t", "r", "fp")
    await store.mirror("t", "r", [GenerationDelta("Hel", (1, 2))])
    assert (await store.claim("t", "r:deltas", "fp")).state is ClaimState.NEW
    assert await store.state("t", "r:deltas") is ClaimState.RUNNING
    await store.record_final("t", "r:deltas", {"stop_reason": "stop"}, keep_s=60, followed=True)
    assert await store.state("t", "r") is ClaimState.RUNNING  # `r` and its stream untouched
    follow = store.follow("t", "r", idle_timeout_s=5)
    assert await anext(follow) == StoredDelta(text="Hel", token_ids=(1, 2))
    await follow.aclose()


async def test_a_claim_whose_owner_died_is_taken_over_once(redis_url: str) -> None:
    """A gateway worker SIGKILLed mid-generation stops renewing its claim: once the owner key
    lapses the id can be claimed again, by exactly one claimant, without the dead owner's
    partial deltas (the chaos run's kill-gateway-worker: the record stayed `running` for the
    idempotency window and every retry with the id failed)."""
    store = IdempotencyStore(aioredis.Redis.from_url(redis_url), owner_ttl_s=1.0)
    assert (await store.claim("t", "r", "fp")).state is ClaimState.NEW
    await store.mirror("t", "r", [GenerationDelta("partial", (1,))])
    renewed_until = asyncio.get_running_loop().time() + 2.5  # past the TTL: renewals kept it
    async with store.owning("t", "r"):  # a live owner keeps it, renewed by the process's keeper
        while asyncio.get_running_loop().time() < renewed_until:
            assert (await store.claim("t", "r", "fp")).state is ClaimState.RUNNING
            await asyncio.sleep(0.05)
    deadline = asyncio.get_running_loop().time() + 30
    while (await store.claim("t", "r", "fp")).state is ClaimState.RUNNING:  # the owner is gone
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    # That claim took it over (NEW); every other claimant now finds it running again.
    claims = await asyncio.gather(*(store.claim("t", "r", "fp") for _ in range(10)))
    assert all(c.state is ClaimState.RUNNING for c in claims)
    assert await aioredis.Redis.from_url(redis_url).exists("sy:req-deltas:t:r") == 0
    await store.record_final("t", "r", {"text": "once"}, keep_s=60, followed=False)
    assert (await store.claim("t", "r", "fp")).result == {"text": "once"}


async def test_a_generation_that_failed_after_tokens_is_resumed_by_one_claim(redis_url: str) -> None:
    """Failed after some tokens (every server it could move to failed): the next claim of the
    id resumes it, with its stored tokens; claims at the same moment find it running; a
    resumer that dies leaves it to be resumed again, from the same stored result."""
    store = IdempotencyStore(aioredis.Redis.from_url(redis_url), owner_ttl_s=1.0)
    failed = {"stop_reason": "error", "error": "2 servers failed", "deltas": [["Hel", [1, 2]]]}
    assert (await store.claim("t", "r", "fp")).state is ClaimState.NEW
    await store.record_final("t", "r", failed, keep_s=60, followed=False, resumable=True)
    claims = await asyncio.gather(*(store.claim("t", "r", "fp") for _ in range(10)))
    assert [c.state for c in claims].count(ClaimState.RESUME) == 1
    assert [c.state for c in claims].count(ClaimState.RUNNING) == 9
    assert next(c.result for c in claims if c.state is ClaimState.RESUME) == failed

    deadline = asyncio.get_running_loop().time() + 30
    while (again := await store.claim("t", "r", "fp")).state is ClaimState.RUNNING:  # the resumer died
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    assert again.state is ClaimState.RESUME and again.result == failed

    await store.record_final("t", "r", {"stop_reason": "length", "deltas": [["Hello", [1, 2, 3]]]}, keep_s=60,
                             followed=False)  # fmt: skip
    done = await store.claim("t", "r", "fp")
    assert done.state is ClaimState.DONE and done.result == {"stop_reason": "length", "deltas": [["Hello", [1, 2, 3]]]}
    assert await aioredis.Redis.from_url(redis_url).hget("sy:req:t:r", "resumable") is None


async def test_followers_get_the_log_probabilities_of_what_they_follow(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    store = IdempotencyStore(client, ttl_s=60)
    await store.claim("t", "lp", "d")
    scores = Logprobs(token_logprobs=(-0.5, -1.25), top_token_ids=(7, 8, 9, 10), top_logprobs=(-0.5, -2.0, -1.25, -3.0))
    await store.mirror("t", "lp", [GenerationDelta("ab", (1, 2), logprobs=scores)])
    follow = store.follow("t", "lp", idle_timeout_s=5.0)
    assert await anext(follow) == StoredDelta("ab", (1, 2), logprobs=scores)
    await client.aclose()
