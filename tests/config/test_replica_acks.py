"""ReplicaAcks on a real primary and replica: a write returns once the replica holds it; a
write the replica does not acknowledge (frozen) fails with NotReplicated, never "done"."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from config.redis_errors import NotReplicated, redis_unreachable
from config.redis_settings import RedisSpec
from config.replica_acks import ReplicaAcks
from config.settings import SwitchyardConfig
from server_host.ports import free_ports
from server_host.process import wait_until
from stack.redis_server import RedisServer

_SET_AND_COUNT = "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCR', KEYS[2])"


@pytest.fixture()
def pair(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    primary_port, replica_port = free_ports(2)
    secrets = tmp_path / "secrets"
    primary = RedisServer(primary_port, tmp_path / "p", tmp_path / "p.log", secrets_dir=secrets)
    replica = RedisServer(
        replica_port, tmp_path / "r", tmp_path / "r.log", secrets_dir=secrets, replica_of=(primary.host, primary.port)
    )
    primary.start()
    replica.start()
    try:
        with redis.Redis.from_url(replica.url) as client:
            assert wait_until(lambda: client.info("replication")["master_link_status"] == "up", 30)
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


def _pid(server: RedisServer) -> int:
    with redis.Redis.from_url(server.url) as client:
        return int(client.info("server")["process_id"])


def test_a_write_returns_once_the_replica_holds_it(pair: tuple[RedisServer, RedisServer]) -> None:
    primary, replica = pair

    async def scenario() -> None:
        client = aioredis.Redis.from_url(primary.url)
        script = client.register_script(_SET_AND_COUNT)
        acks = ReplicaAcks(1, 5000)
        with redis.Redis.from_url(replica.url) as on_replica:
            for i in range(20):
                # The script's own reply comes back, and the replica has its writes already.
                assert await acks.run(client, script, ["sy:k", "sy:n"], [str(i)]) == i + 1
                assert on_replica.get("sy:k") == str(i).encode()
        assert acks.short_acks == 0
        await client.script_flush()  # a newly promoted primary may not know the script yet
        assert await acks.run(client, script, ["sy:k", "sy:n"], ["again"]) == 21
        assert acks.short_acks == 0
        await client.aclose()

    asyncio.run(scenario())


def test_a_write_no_replica_acknowledged_is_not_acknowledged(pair: tuple[RedisServer, RedisServer]) -> None:
    """A frozen replica (connected, acknowledging nothing) acknowledges no write: each waits out
    the timeout and fails with NotReplicated ("retry"), the next one as much as the first."""
    primary, replica = pair

    async def scenario() -> None:
        client = aioredis.Redis.from_url(primary.url)
        script = client.register_script(_SET_AND_COUNT)
        acks = ReplicaAcks(1, 300)
        pid = _pid(replica)
        os.kill(pid, signal.SIGSTOP)  # connected still, but acknowledging nothing
        try:
            for expected_short in (1, 2):
                started = time.monotonic()
                with pytest.raises(NotReplicated):
                    await acks.run(client, script, ["sy:k", "sy:n"], ["a"])
                assert time.monotonic() - started >= 0.3  # it did wait (a WAIT on another connection would not)
                assert acks.short_acks == expected_short
                assert redis_unreachable(NotReplicated("x"))
        finally:
            os.kill(pid, signal.SIGCONT)
        # Acknowledged again once the replica runs. A thawed replica on a busy machine may take
        # longer than 300 ms to catch up, so this write gets a generous timeout of its own.
        assert await ReplicaAcks(1, 30_000).run(client, script, ["sy:k", "sy:n"], ["b"]) == 3
        await client.aclose()

    asyncio.run(scenario())


def test_no_replicas_asked_is_the_plain_script(redis_url: str) -> None:
    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        script = client.register_script(_SET_AND_COUNT)
        assert await ReplicaAcks(0, 1).run(client, script, ["sy:k", "sy:n"], ["x"]) == 1
        await client.aclose()

    asyncio.run(scenario())


def test_sentinel_mode_waits_for_one_replica_by_default(tmp_path: Path) -> None:
    base = {
        "root": tmp_path,
        "models": {"m": {"weights_uri": "m", "max_context_tokens": 64}},
        "pools": {"m": {"model_id": "m", "ports": {"http": 9101, "grpc": 9102, "metrics": 9103}}},
    }
    single = SwitchyardConfig.model_validate(base)
    sentinel = SwitchyardConfig.model_validate({**base, "redis": {"sentinels": [{"host": "127.0.0.1"}]}})
    chosen = SwitchyardConfig.model_validate({**base, "redis": {"sentinels": [{"host": "h"}], "replica_acks": 2}})
    assert (single.redis.acks_required, sentinel.redis.acks_required, chosen.redis.acks_required) == (0, 1, 2)
    with pytest.raises(ValueError):
        ReplicaAcks(-1, 100)


def test_a_replica_slow_for_a_moment_still_acknowledges_within_the_default(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    """A replica on a saturated host answers late now and then: paused for 0.35 s, it still
    acknowledges within `redis.replica_ack_timeout_ms` (at 200 ms: a spurious "not durable"
    503 in `bench partitions`; here 0 of 12 pauses, 12 of 12 at 500 ms; Redis checks a WAIT's
    timeout about every 100 ms, so a shorter pause would not tell them apart). Counted over
    ten pauses, in case a thawed replica answers only with its own once-a-second
    acknowledgement now and then."""
    primary, replica = pair
    timeout_ms = RedisSpec().replica_ack_timeout_ms

    async def scenario() -> int:
        client = aioredis.Redis.from_url(primary.url)
        script = client.register_script(_SET_AND_COUNT)
        acks = ReplicaAcks(1, timeout_ms)
        # A link in use, as a gateway's is: the first WAIT after a replica connects may wait
        # for the replica's own once-a-second acknowledgement.
        assert await ReplicaAcks(1, 30_000).run(client, script, ["sy:k", "sy:n"], ["warm"]) == 1
        pid = _pid(replica)
        acknowledged = 0
        for _ in range(10):
            os.kill(pid, signal.SIGSTOP)
            thaw = asyncio.get_running_loop().call_later(0.35, os.kill, pid, signal.SIGCONT)
            try:
                await acks.run(client, script, ["sy:k", "sy:n"], ["slow"])
                acknowledged += 1
            except NotReplicated:
                pass
            finally:
                thaw.cancel()
                os.kill(pid, signal.SIGCONT)
            await asyncio.sleep(0.05)
        await client.aclose()
        return acknowledged

    acknowledged = asyncio.run(scenario())
    assert acknowledged >= 7, f"{acknowledged} of 10 writes acknowledged within {timeout_ms} ms"
