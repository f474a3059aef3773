"""Sentinel mode with real processes: a primary, a replica and three sentinels (quorum 2).

Three sentinels, as production runs them: with one, a sentinel that loses sight of the primary
fails it over alone, and the test would not exercise the vote. They cost a few MB each.

The primary is SIGKILLed; the components' clients (config/redis_client.py) must reach the
promoted replica by themselves, each logged in as its own user, and the subscribers (the
gateway's request bus, the registry's change notices) must hear messages published after it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from config.redis_client import redis_client, sync_redis_client
from config.redis_errors import redis_unreachable
from fleet_state.registry import CHANGES_CHANNEL
from server_host.ports import free_ports
from server_host.process import wait_until
from serving.request_bus import BusMessage, RequestBus
from stack.redis_sentinel import ASK_PERIOD_MS, PING_PERIOD_MS, PUBLISH_PERIOD_MS, RedisReplicaSet

from .replica_config import replica_set_config

pytestmark = pytest.mark.integration

DEADLINE_S = 60.0  # down_after 1 s, then a vote and a promotion: seconds on an idle machine


@pytest.fixture()
def replica_set(tmp_path: Path) -> Iterator[RedisReplicaSet]:
    ports = free_ports(6)
    replicas = RedisReplicaSet(  # two replicas: the promoted one still has one to write with
        ports[:3],
        ports[3:],
        tmp_path / "redis",
        secrets_dir=tmp_path / "secrets",
        down_after_ms=1000,
        failover_timeout_ms=5000,
        host="127.0.0.1",
    )
    replicas.start()
    try:
        yield replicas
    finally:
        replicas.stop()


def test_sentinels_admit_components_for_queries_only(replica_set: RedisReplicaSet, tmp_path: Path) -> None:
    sentinel = replica_set.sentinels[0]
    password = replica_set.nodes[0].secrets.redis_passwords["gateway"]
    with redis.Redis(host=sentinel.host, port=sentinel.port, username="gateway", password=password) as client:
        assert client.sentinel_get_master_addr_by_name(replica_set.master_name)
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.sentinel_failover(replica_set.master_name)  # type: ignore[no-untyped-call]
    with redis.Redis(host=sentinel.host, port=sentinel.port) as anonymous, pytest.raises(redis.AuthenticationError):
        anonymous.sentinel_masters()
    with sync_redis_client(replica_set_config(replica_set, tmp_path), "gateway") as client:
        assert client.acl_whoami() == "gateway"


def test_every_sentinel_pings_asks_and_says_hello_five_times_a_second(replica_set: RedisReplicaSet) -> None:
    """Set at each start (SENTINEL DEBUG keeps it in memory only): a silent primary is seen
    down within 0.2 s of `down-after`, and objectively down 0.2 s later, not 1 s and 1 s; a
    promotion reaches every sentinel within 0.2 s, not 2 s."""
    for sentinel in replica_set.sentinels:
        timings = sentinel.timings()
        periods = (timings["ping-period"], timings["ask-period"], timings["publish-period"])
        assert periods == (PING_PERIOD_MS, ASK_PERIOD_MS, PUBLISH_PERIOD_MS) == (200, 200, 200)
    sentinel = replica_set.sentinels[0]
    password = replica_set.nodes[0].secrets.redis_passwords["gateway"]
    with (
        redis.Redis(host=sentinel.host, port=sentinel.port, username="gateway", password=password) as client,
        pytest.raises(redis.exceptions.NoPermissionError),
    ):
        client.execute_command("SENTINEL", "DEBUG", "ping-period", 10000)  # a component may not


def test_clients_and_subscribers_follow_a_failover(replica_set: RedisReplicaSet, tmp_path: Path) -> None:
    config = replica_set_config(replica_set, tmp_path)
    first = replica_set.nodes[0]
    assert replica_set.primary() == (first.host, first.port)
    with sync_redis_client(config, "fleet") as fleet:
        fleet.set("sy:before", "1")
        wait_until(lambda: replica_set.nodes[1].role() == "slave", 5)  # the replica has it once synced

    async def scenario() -> float:
        gateway = redis_client(config, "gateway", socket_timeout=2.0, socket_connect_timeout=2.0)
        heard: list[str] = []
        bus = RequestBus(redis_client(config, "gateway"))

        async def handler(message: BusMessage, scoped_id: str) -> None:
            heard.append(scoped_id)

        await bus.start(handler)
        changes = redis_client(config, "gateway").pubsub()
        await changes.subscribe(CHANGES_CHANNEL)
        try:
            assert await gateway.get("sy:before") == b"1"
            first.kill()
            killed_at = time.monotonic()
            # Writes fail while no primary is elected, then land on the promoted replica.
            while time.monotonic() - killed_at < DEADLINE_S:
                try:
                    await gateway.set("sy:after", "2")
                    break
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                    await asyncio.sleep(0.2)
            recovered_s = time.monotonic() - killed_at
            assert await gateway.get("sy:after") == b"2", f"no primary within {DEADLINE_S} s"
            assert wait_until(lambda: replica_set.primary() not in (None, (first.host, first.port)), DEADLINE_S)
            promoted = next(n for n in replica_set.nodes[1:] if (n.host, n.port) == replica_set.primary())
            assert promoted.role() == "master"
            assert await gateway.acl_whoami() == "gateway"  # its own user on the new primary
            # The subscribers are back: a cancel published now reaches the bus.
            while time.monotonic() - killed_at < DEADLINE_S and "team/late" not in heard:
                await bus.publish(BusMessage.CANCEL, "team/late")
                await asyncio.sleep(0.2)
            assert "team/late" in heard
            await gateway.publish(CHANGES_CHANNEL, "server-1")
            deadline = time.monotonic() + DEADLINE_S
            notice = None
            while notice is None and time.monotonic() < deadline:
                try:
                    notice = await changes.get_message(ignore_subscribe_messages=True, timeout=1.0)
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                    await changes.subscribe(CHANGES_CHANNEL)  # what router/server_directory.py does
                if notice is None:  # published before the subscription moved to the new primary
                    await gateway.publish(CHANGES_CHANNEL, "server-1")
            assert notice is not None and notice["data"] == b"server-1"
            return recovered_s
        finally:
            await bus.close()
            await changes.aclose()  # type: ignore[no-untyped-call]
            await gateway.aclose()

    recovered_s = asyncio.run(scenario())
    print(f"writes reached the new primary {recovered_s:.1f} s after the kill")

    # The old primary comes back as a replica of the new one, with the writes made since.
    again = replica_set.rejoin(first, DEADLINE_S)
    assert again.role() == "slave" and replica_set.nodes[0] is again
    with redis.Redis.from_url(again.url) as old:
        assert wait_until(lambda: old.get("sy:after") == b"2", DEADLINE_S)
    assert replica_set.primary() in [(n.host, n.port) for n in replica_set.nodes[1:]]


def test_a_primary_refusing_writes_for_want_of_replicas_sends_clients_back_to_the_sentinels(
    replica_set: RedisReplicaSet, tmp_path: Path
) -> None:
    """Both replicas gone: the primary refuses writes (NOREPLICAS, `min-replicas-to-write 1`).
    Cut off by a partition, a new primary may already run on the other side: the clients'
    connections are dropped and the refusal reads as a ConnectionError, so the next connection
    asks the sentinels again and every caller's retry treats it as Redis unreachable."""
    config = replica_set_config(replica_set, tmp_path)
    for replica in replica_set.nodes[1:]:
        replica.kill()
    refused: list[BaseException] = []

    def write_refused() -> bool:
        with sync_redis_client(config, "fleet") as client:
            try:
                client.set("sy:refused", "1")
            except redis.ConnectionError as exc:
                refused.append(exc)
                return True
            return False

    assert wait_until(write_refused, DEADLINE_S), "the primary kept taking writes with no replica"
    assert "asking the sentinels again" in str(refused[-1]) and redis_unreachable(refused[-1])

    async def async_refusal() -> BaseException:
        client = redis_client(config, "gateway", socket_timeout=2.0, socket_connect_timeout=2.0)
        try:
            await client.set("sy:refused", "1")
        except redis.ConnectionError as exc:
            return exc
        finally:
            await client.aclose()
        raise AssertionError("the primary took a write with no replica")

    refusal = asyncio.run(async_refusal())
    assert "asking the sentinels again" in str(refusal) and redis_unreachable(refusal)


def test_a_restarted_primary_takes_writes_again_within_seconds(tmp_path: Path) -> None:
    """A primary restarted quicker than `down-after` stays the primary, under a new replication
    id: each replica needs a full sync, and with `min-replicas-to-write` no write is taken
    until one has synced. The sync starts at once (`repl-diskless-sync-delay 0`); Redis's
    default waits 5 s for more replicas to share it (the chaos run's restart-redis: 7.5 s)."""
    ports = free_ports(5)
    replicas = RedisReplicaSet(
        ports[:2],
        ports[2:],
        tmp_path / "redis",
        secrets_dir=tmp_path / "secrets",
        down_after_ms=30000,  # the restart must not be taken for a death
        host="127.0.0.1",
    )
    replicas.start()
    try:
        primary = replicas.nodes[0]
        with redis.Redis.from_url(primary.url, socket_timeout=2.0) as client:
            client.set("before", "1")
        primary.stop()
        began = time.monotonic()
        again = replicas.rejoin(primary)
        assert replicas.primary() == (again.host, again.port)

        def writes() -> bool:
            try:
                with redis.Redis.from_url(again.url, socket_timeout=2.0) as client:
                    return bool(client.set("after", "1"))
            except redis.RedisError:  # NOREPLICAS until a replica has synced; LOADING
                return False

        assert wait_until(writes, DEADLINE_S, interval_s=0.05)
        took = time.monotonic() - began
        print(f"a restarted primary took writes again {took:.2f} s after it stopped")
        assert took < 4.5, took  # Redis's default delay alone is 5 s
    finally:
        replicas.stop()
