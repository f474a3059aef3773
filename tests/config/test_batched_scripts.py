"""BatchedScripts on a real Redis: concurrent calls go out together, each caller gets its own
reply or error, a script the server does not know is sent once and only refused calls again,
and with a replica one WAIT covers a batch."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from config.batched_scripts import BatchedScripts
from config.redis_errors import NotReplicated
from config.replica_acks import ReplicaAcks

_INCR_BY = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
_FAIL_ON_NEGATIVE = "if tonumber(ARGV[1]) < 0 then return redis.error_reply('negative') end return ARGV[1]"


async def test_concurrent_calls_share_pipelines_and_get_their_own_replies(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    scripts = BatchedScripts(max_batch=64, senders=2)
    incr = client.register_script(_INCR_BY)
    await client.script_load(_INCR_BY)  # known: no call refused and sent again
    await client.delete("batched:n")
    replies = await asyncio.gather(*(scripts.run(client, incr, ["batched:n"], [1]) for _ in range(500)))
    assert sorted(int(r) for r in replies) == list(range(1, 501))  # each ran once, in some order
    assert scripts.calls == 500
    assert scripts.batches <= 500 // 64 + 4  # coalesced: not one round trip each


async def test_an_idle_call_goes_at_once_alone(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    scripts = BatchedScripts()
    incr = client.register_script(_INCR_BY)
    for expected_batches in (1, 2, 3):
        await scripts.run(client, incr, ["batched:idle"], [1])
        assert scripts.batches == expected_batches


async def test_a_failing_script_fails_its_caller_alone(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    scripts = BatchedScripts()
    check = client.register_script(_FAIL_ON_NEGATIVE)
    outcomes = await asyncio.gather(*(scripts.run(client, check, [], [n]) for n in (1, -1, 2)), return_exceptions=True)
    assert outcomes[0] == b"1" and outcomes[2] == b"2"
    assert isinstance(outcomes[1], aioredis.ResponseError) and "negative" in str(outcomes[1])


async def test_an_unknown_script_is_loaded_and_only_refused_calls_resent(redis_url: str) -> None:
    """A new primary knows no scripts: the batch's EVALSHAs are refused, the script is loaded
    and those calls sent again; a call that already ran is not run twice."""
    client = aioredis.Redis.from_url(redis_url)
    scripts = BatchedScripts()
    incr = client.register_script(_INCR_BY)
    await client.delete("batched:flush")
    await client.script_flush()
    replies = await asyncio.gather(*(scripts.run(client, incr, ["batched:flush"], [1]) for _ in range(20)))
    assert sorted(int(r) for r in replies) == list(range(1, 21))
    assert int(await client.get("batched:flush")) == 20
    assert scripts.calls <= 40  # each refused at most once


async def test_a_lost_connection_fails_every_call_in_the_batch(redis_url: str) -> None:
    dead = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)  # nothing listens
    scripts = BatchedScripts()
    incr = dead.register_script(_INCR_BY)
    outcomes = await asyncio.gather(*(scripts.run(dead, incr, ["k"], [1]) for _ in range(5)), return_exceptions=True)
    assert all(isinstance(o, aioredis.ConnectionError) for o in outcomes)
    # Nothing is left queued: a later call is sent (and fails) too, rather than hanging.
    with pytest.raises(aioredis.ConnectionError):
        await asyncio.wait_for(scripts.run(dead, incr, ["k"], [1]), 30)


async def test_one_wait_per_batch_with_replicas_asked(redis_url: str) -> None:
    """Without a replica WAIT answers 0: the writes ran on the primary, but not one of them is
    acknowledged to its caller (each gets NotReplicated, "retry"), as one WAIT covers them all."""
    client = aioredis.Redis.from_url(redis_url)
    acks = ReplicaAcks(1, 50)
    scripts = BatchedScripts(acks)
    incr = client.register_script(_INCR_BY)
    await client.delete("batched:wait")
    outcomes = await asyncio.gather(
        *(scripts.run(client, incr, ["batched:wait"], [1]) for _ in range(10)), return_exceptions=True
    )
    assert all(isinstance(o, NotReplicated) for o in outcomes), outcomes
    assert int(await client.get("batched:wait")) == 10
    assert 1 <= acks.short_acks == scripts.batches <= 10
