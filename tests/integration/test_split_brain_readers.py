"""A client that only reads leaves a primary replaced behind a partition (config/sentinel_primary.py).

    bridge (this namespace: the client, a gateway reaching every host)
      ├─ redis0      the primary                       ╮ cut from each other by blackhole
      ├─ redis1/2    its replicas                      │ routes: no FIN, no RST; the client
      └─ sentinels   three, quorum 2                   ╯ still reaches both sides

The sentinels promote a replica (two: the promoted one has one to write with); redis0, out of
their reach, is never told, stays a primary of its own and goes on answering reads with what
it held at the cut. A pool that only reads (the router's server directory) and a subscription
(the request bus) must move to the new primary within seconds of the promotion, not at the
heal: `bench partitions`' split brain showed a gateway's pool full for 20 s while it read the
old primary's aging heartbeats.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.sentinel

from config.redis_client import redis_client, sync_redis_client
from faults.netns_hosts import BridgedNetwork, NamespacesUnavailable, bridged_hosts, process_subnet
from server_host.ports import free_ports
from server_host.process import wait_until
from serving.request_bus import CHANNEL, BusMessage, RequestBus
from stack.redis_sentinel import Placement, RedisReplicaSet

from .replica_config import replica_set_config

pytestmark = pytest.mark.integration

DEADLINE_S = 60.0
MOVED_WITHIN_S = 5.0  # after the promotion: primary_check_s (1 s) and a reconnect, on a loaded machine
HELLO_WITHIN_S = 0.7  # a hello every 0.2 s (stack/redis_sentinel.PUBLISH_PERIOD_MS), on a loaded machine


@pytest.fixture
def split_set(tmp_path: Path) -> Iterator[tuple[RedisReplicaSet, BridgedNetwork]]:
    try:
        with bridged_hosts(["redis0", "redis1", "redis2", "sentinels"], subnet=process_subnet()) as net:
            ports = free_ports(6)
            at = {role: Placement(net[role].address, tuple(net[role].command([]))) for role in net.hosts}
            replicas = RedisReplicaSet(
                ports[:3], ports[3:], tmp_path / "redis", secrets_dir=tmp_path / "secrets",
                down_after_ms=1000, failover_timeout_ms=4000, host=net["redis0"].address,
                nodes_at=[at["redis0"], at["redis1"], at["redis2"]], sentinels_at=[at["sentinels"]] * 3,
            )  # fmt: skip
            replicas.start()
            try:
                yield replicas, net
            finally:
                net.heal_all()
                replicas.stop()
    except NamespacesUnavailable as exc:
        pytest.skip(f"no network namespaces here: {exc}")


def test_readers_and_subscribers_leave_a_primary_replaced_behind_a_partition(
    split_set: tuple[RedisReplicaSet, BridgedNetwork], tmp_path: Path
) -> None:
    replicas, net = split_set
    old = replicas.nodes[0]
    config = replica_set_config(replicas, tmp_path)
    admin = old.secrets.redis_passwords["admin"]

    async def scenario() -> tuple[float, float]:
        reader = redis_client(config, "gateway", socket_timeout=2.0, socket_connect_timeout=2.0)
        bus = RequestBus(redis_client(config, "gateway", socket_timeout=2.0, socket_connect_timeout=2.0))
        heard: list[str] = []

        async def handler(message: BusMessage, scoped_id: str) -> None:
            heard.append(scoped_id)

        await bus.start(handler)
        try:
            with redis.Redis(host=old.host, port=old.port, username="admin", password=admin) as primary:
                primary.set("sy:heartbeat", "before")
            assert await reader.get("sy:heartbeat") == b"before"
            net.cut_between(["redis0"], ["redis1", "redis2", "sentinels"])
            assert await asyncio.to_thread(
                wait_until, lambda: replicas.primary() not in (None, (old.host, old.port)), DEADLINE_S
            ), "the sentinels did not promote a replica: the test proves nothing"
            promoted_at = time.monotonic()
            new = replicas.primary()
            assert new is not None
            with redis.Redis(host=new[0], port=new[1], username="admin", password=admin) as promoted:
                promoted.set("sy:heartbeat", "after")  # what the servers write on the majority side
                # The old primary, unreachable by the sentinels, still a primary of its own.
                with redis.Redis(host=old.host, port=old.port, username="admin", password=admin) as isolated:
                    assert isolated.get("sy:heartbeat") == b"before"
                while await _read(reader) != b"after":
                    assert time.monotonic() - promoted_at < DEADLINE_S, "the reader stayed on the old primary"
                    await asyncio.sleep(0.1)
                read_moved_s = time.monotonic() - promoted_at
                while "team/after" not in heard:
                    assert time.monotonic() - promoted_at < DEADLINE_S, "the subscription stayed on the old primary"
                    promoted.publish(CHANNEL, f"{BusMessage.CANCEL.value} team/after")
                    await asyncio.sleep(0.2)
                heard_s = time.monotonic() - promoted_at
            return read_moved_s, heard_s
        finally:
            await bus.close()
            await reader.aclose()

    read_moved_s, heard_s = asyncio.run(scenario())
    print(f"\nafter the promotion: reads on the new primary in {read_moved_s:.1f} s, the bus in {heard_s:.1f} s")
    assert read_moved_s < MOVED_WITHIN_S
    assert heard_s < MOVED_WITHIN_S


async def _read(client: redis.asyncio.Redis) -> bytes | str | None:
    try:
        return await client.get("sy:heartbeat")
    except (redis.ConnectionError, redis.TimeoutError):  # the connection to the old one closed
        return None


def test_clients_find_the_promoted_primary_within_a_hello_of_the_promotion(
    split_set: tuple[RedisReplicaSet, BridgedNetwork], tmp_path: Path
) -> None:
    """The failover's leader names the promoted replica from the promotion on, but reports its
    primary down until the other replica is reconfigured (~1 s later, on INFO); clients take
    the first sentinel that names a primary up, so they follow when the other sentinels hear
    the leader's hello. It sends one at the promotion; in one of `bench partitions`' three
    split brains the others missed it and waited 1.45 s for the one after the leader's last
    step, since hellos went out every 2 s. (Here the first hello arrives: this checks the
    bound, it does not make a hello go missing.)"""
    replicas, net = split_set
    old = replicas.nodes[0]
    config = replica_set_config(replicas, tmp_path)
    with sync_redis_client(config, "gateway") as client:
        sentinels = client.connection_pool.sentinel_manager  # what every client of ours asks
        assert tuple(sentinels.discover_master(replicas.master_name)) == (old.host, old.port)
        net.cut_between(["redis0"], ["redis1", "redis2", "sentinels"])
        promoted_at: float | None = None
        deadline = time.monotonic() + DEADLINE_S
        while True:
            assert time.monotonic() < deadline, "the sentinels did not promote a replica: the test proves nothing"
            now = time.monotonic()
            if promoted_at is None and any(s.primary() not in (None, (old.host, old.port)) for s in replicas.sentinels):
                promoted_at = now  # the leader names the promoted replica
            try:
                named = tuple(sentinels.discover_master(replicas.master_name))
            except redis.sentinel.MasterNotFoundError:
                named = None
            if named not in (None, (old.host, old.port)):
                break
            time.sleep(0.02)
    assert promoted_at is not None
    followed_s = now - promoted_at
    print(f"\nclients found the promoted primary {followed_s:.2f} s after the promotion")
    assert followed_s <= HELLO_WITHIN_S
