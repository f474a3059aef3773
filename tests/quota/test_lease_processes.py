"""Leases across gateway processes, against a real redis-server: two processes racing for the
last tokens never take more than the pool holds, and a SIGKILLed holder leaks nothing after
its lease's TTL."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from quota.leases import LeaseStore
from quota.shares import Decision, SharePolicy, TeamLoad

pytestmark = pytest.mark.integration

WORKER = Path(__file__).with_name("lease_worker.py")


def start(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(process: subprocess.Popen[str]) -> dict[str, int]:
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    result: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return result


def go(client: redis.Redis, workers: int) -> None:
    """Start the workers together, once every one of them is connected and waiting."""
    deadline = time.monotonic() + 20
    while int(client.get("test:ready") or 0) < workers:
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.01)
    client.set("test:go", 1)


def pool_loads(client: redis.Redis) -> dict[str, TeamLoad]:
    """Leases in force, read straight from the store's hashes in one MULTI (one instant)."""
    pipe = client.pipeline(transaction=True)
    for kind in ("owned", "borrowed", "preemptible"):
        pipe.hgetall(f"sy:pool:small:{kind}")
    owned, borrowed, preemptible = ({k.decode(): int(v) for k, v in raw.items()} for raw in pipe.execute())
    return {
        t: TeamLoad(owned.get(t, 0), borrowed.get(t, 0), preemptible_tokens=preemptible.get(t, 0))
        for t in owned.keys() | borrowed.keys() | preemptible.keys()
    }


def test_two_processes_filling_a_pool_never_take_more_than_it_holds(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    capacity = 2000
    workers = [start("fill", redis_url, "a", capacity, 8) for _ in range(2)]
    go(client, 2)
    granted = [finish(worker)["granted"] for worker in workers]
    held = sum(load.in_use for load in pool_loads(client).values())
    assert held == sum(granted)
    assert capacity - 7 < held <= capacity  # full, and not one token over
    assert all(g > 0 for g in granted)  # both really raced


def test_two_processes_churning_leases_stay_within_capacity(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    capacity = 3000
    workers = [start("churn", redis_url, team, capacity, 6, 120) for team in ("a", "c")]
    go(client, 2)
    peak = 0
    while any(worker.poll() is None for worker in workers):
        peak = max(peak, sum(load.in_use for load in pool_loads(client).values()))
        assert peak <= capacity
        time.sleep(0.002)
    results = [finish(worker) for worker in workers]
    assert all(result["admitted"] > 20 for result in results)
    assert peak > capacity // 2  # the pool was really contended
    assert pool_loads(client) == {}  # everything released
    assert client.hgetall("sy:team_inflight") == {}


async def reserve_whole_pool(redis_url: str, capacity: int) -> Decision:
    """Another gateway asks for every token of the pool at once."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        store = LeaseStore(client, SharePolicy({"a": 1.0, "b": 3.0, "c": 4.0}))
        outcome = await store.reserve("a", "small", capacity, 10, capacity_tokens=capacity)
        return outcome.decision.decision
    finally:
        await client.aclose()


def test_a_killed_holder_leaks_nothing_after_the_lease_ttl(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    holder = start("hold", redis_url, "b", 500, 1.0)
    assert holder.stdout is not None and holder.stderr is not None
    line = holder.stdout.readline()
    reserved_by = time.time()
    assert line.startswith("held "), holder.stderr.read()
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    # Nobody released it. (Alone, b borrowed the pool beyond its static share.)
    assert pool_loads(client) == {"b": TeamLoad(borrowed_tokens=500)}
    if time.time() < reserved_by + 0.8:  # (a very slow machine may already be past the TTL)
        assert not asyncio.run(reserve_whole_pool(redis_url, 500)).admitted
    # Once its TTL is over, the next script anywhere reclaims it: here, another gateway's reserve.
    time.sleep(max(0.0, reserved_by + 1.05 - time.time()))
    assert asyncio.run(reserve_whole_pool(redis_url, 500)) is Decision.BORROW
    assert pool_loads(client) == {"a": TeamLoad(borrowed_tokens=500)}
