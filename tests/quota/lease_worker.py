"""A gateway stand-in for the two-process lease tests (run as a script, not collected).

    lease_worker.py fill  URL TEAM CAPACITY TASKS     reserve 7-token leases until the pool is full
    lease_worker.py churn URL TEAM CAPACITY TASKS OPS reserve and release bulk leases at random
    lease_worker.py hold  URL TEAM TOKENS TTL_S       reserve once, print the lease id, sleep

`fill` and `churn` count themselves in `test:ready`, then wait for the key `test:go` so that
both processes start together; each prints one JSON line of what it was granted.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys

import redis.asyncio as aioredis

from quota.leases import Lease, LeaseStore
from quota.shares import SharePolicy

WEIGHTS = {"a": 1.0, "b": 3.0, "c": 4.0}


async def wait_for_go(client: aioredis.Redis) -> None:
    await client.incr("test:ready")
    while not await client.exists("test:go"):
        await asyncio.sleep(0.005)


async def fill(store: LeaseStore, team: str, capacity: int, tasks: int) -> dict[str, int]:
    granted = 0

    async def one() -> None:
        nonlocal granted
        refusals = 0
        while refusals < 3:
            outcome = await store.reserve(team, "small", 7, 60, capacity_tokens=capacity)
            if outcome.lease is None:
                refusals += 1
            else:
                granted += outcome.lease.tokens

    await asyncio.gather(*(one() for _ in range(tasks)))
    return {"granted": granted}


async def churn(store: LeaseStore, team: str, capacity: int, tasks: int, ops: int) -> dict[str, int]:
    rng = random.Random(team)
    admitted = 0

    async def one() -> None:
        nonlocal admitted
        held: list[Lease] = []
        for _ in range(ops):
            if held and rng.random() < 0.45:
                await store.release(held.pop(rng.randrange(len(held))))
                continue
            tokens = rng.randint(1, capacity // 6)
            outcome = await store.reserve(team, "small", tokens, 60, capacity_tokens=capacity, interactive=False)
            if outcome.lease is not None:
                held.append(outcome.lease)
                admitted += 1
        for lease in held:
            await store.release(lease)

    await asyncio.gather(*(one() for _ in range(tasks)))
    return {"admitted": admitted}


async def hold(store: LeaseStore, team: str, tokens: int, ttl_s: float) -> None:
    outcome = await store.reserve(team, "small", tokens, ttl_s, capacity_tokens=tokens)
    assert outcome.lease is not None, outcome.decision.reason
    print(f"held {outcome.lease.lease_id}", flush=True)
    await asyncio.sleep(3600)


async def main(argv: list[str]) -> None:
    mode, url, team = argv[:3]
    client = aioredis.Redis.from_url(url)
    store = LeaseStore(client, SharePolicy(WEIGHTS))
    try:
        if mode == "hold":
            await hold(store, team, int(argv[3]), float(argv[4]))
            return
        await wait_for_go(client)
        if mode == "fill":
            result = await fill(store, team, int(argv[3]), int(argv[4]))
        else:
            result = await churn(store, team, int(argv[3]), int(argv[4]), int(argv[5]))
        print(json.dumps(result), flush=True)
    finally:
        await client.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
