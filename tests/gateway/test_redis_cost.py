"""What one request costs Redis does not grow with its reply: no write per delta, and a
request without a caller-made id leaves nothing behind (real Redis; INFO commandstats)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis

from contracts.generation import GenerationDelta
from serving.requests_registry import RequestRegistry

BODY: dict[str, Any] = {"model": "large", "prompt": "the quick brown fox", "stream": True}


def commands_run(r: redis.Redis) -> int:
    """Every command Redis has run since it started (INFO commandstats), less the INFO calls."""
    stats: dict[str, dict[str, int]] = r.info("commandstats")  # type: ignore[assignment]
    return sum(stat["calls"] for name, stat in stats.items() if name != "cmdstat_info")


def reply_of(tokens: int) -> list[GenerationDelta]:
    deltas = [GenerationDelta(text=f"t{i} ", token_ids=(i,)) for i in range(tokens - 1)]
    return [*deltas, GenerationDelta(text="end", token_ids=(tokens,), finish_reason="length")]


async def commands_per_request(
    client: httpx.AsyncClient, backend: Any, registry: RequestRegistry, r: redis.Redis, tokens: int, with_id: bool
) -> int:
    backend.deltas = reply_of(tokens)
    before = commands_run(r)
    body = {**BODY, "max_tokens": tokens}
    if with_id:
        body["request_id"] = f"cost-{tokens}-{before}"  # a new id each time: never a repeat
    response = await client.post("/v1/generate", json=body)
    assert response.status_code == 200 and '"stop_reason":"length"' in response.text
    await registry.settled()  # its record, lease and usage are written after the reply
    return commands_run(r) - before


@pytest.mark.parametrize("with_id", [False, True], ids=["generated-id", "caller-id"])
async def test_commands_per_request_are_the_same_at_10_300_and_2000_tokens(
    client: httpx.AsyncClient, backend: Any, registry: RequestRegistry, redis_url: str, with_id: bool
) -> None:
    with redis.Redis.from_url(redis_url) as r:
        await commands_per_request(client, backend, registry, r, 10, with_id)  # warm: scripts loaded
        costs = {
            tokens: await commands_per_request(client, backend, registry, r, tokens, with_id)
            for tokens in (10, 300, 2000)
        }
    assert len(set(costs.values())) == 1, costs
    # A constant, and a small one: each command Redis runs counts, those inside the claim,
    # admission and release scripts too (docs/capacity.md has the breakdown).
    assert costs[10] <= 50, costs


async def test_a_request_without_a_caller_id_leaves_only_usage_behind(
    client: httpx.AsyncClient, backend: Any, registry: RequestRegistry, redis_url: str
) -> None:
    with redis.Redis.from_url(redis_url) as r:
        await commands_per_request(client, backend, registry, r, 300, with_id=False)
        assert r.keys("sy:req:*") == []
        await commands_per_request(client, backend, registry, r, 300, with_id=True)
        (kept,) = r.keys("sy:req:*")  # the result, for repeats
        assert kept.startswith(b"sy:req:alpha:cost-300-") and r.ttl(kept) > 23 * 3600


async def test_a_bulk_result_is_kept_briefly(
    client: httpx.AsyncClient, registry: RequestRegistry, redis_url: str
) -> None:
    """Its dispatcher writes the result itself and retries under a new id: a day of bulk
    results kept for repeats nobody sends would fill Redis."""
    body = {**BODY, "max_tokens": 3, "class": "bulk", "request_id": "bulk-entry"}
    assert (await client.post("/v1/generate", json=body)).status_code == 200
    await registry.settled()
    with redis.Redis.from_url(redis_url) as r:
        assert 0 < r.ttl("sy:req:alpha:bulk-entry") <= 600
