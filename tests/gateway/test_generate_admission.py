"""Admission on the real app: each request leases prompt + max_tokens of its pool's KV. A pool of
100 tokens shared by alpha and beta (weight 1 each): 50 each while both want capacity. Requests
are held by the FakeBackend so their leases stay in force; Redis is real."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import redis

from quota.capacity import StaticCapacity
from tests.auth_headers import bearer

PROMPT = "the quick brown fox"
POOL_TOKENS = 100
Until = Callable[[Callable[[], bool]], Awaitable[None]]


@pytest.fixture
def capacity() -> StaticCapacity:
    return StaticCapacity({"small": POOL_TOKENS, "large": POOL_TOKENS})


@pytest.fixture
def lease_body(count_tokens: Callable[[str], int]) -> Callable[..., dict[str, Any]]:
    """A /v1/generate body that leases exactly `tokens` (prompt + max_tokens)."""

    def body(tokens: int, request_class: str = "interactive", **extra: Any) -> dict[str, Any]:
        max_tokens = tokens - count_tokens(PROMPT)
        return {"model": "small", "prompt": PROMPT, "max_tokens": max_tokens, "class": request_class, **extra}

    return body


async def test_a_team_beyond_its_share_is_429_while_the_other_is_admitted(
    client: httpx.AsyncClient,
    backend: Any,
    make_key: Callable[[str], str],
    lease_body: Callable[..., dict[str, Any]],
    redis_url: str,
    until: Until,
) -> None:
    backend.hold_after = 0
    beta = bearer(make_key("beta"))
    held = [asyncio.create_task(client.post("/v1/generate", json=lease_body(30), headers=beta))]
    await until(lambda: len(backend.requests) == 1)
    held.append(asyncio.create_task(client.post("/v1/generate", json=lease_body(50))))
    await until(lambda: len(backend.requests) == 2)

    refused = await client.post("/v1/generate", json=lease_body(30, request_id="more"))
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["type"] == "rate_limit_error"
    assert "team 'alpha' holds 50 KV tokens" in error["message"] and "its share is 50" in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 30  # when alpha's own leases end
    with redis.Redis.from_url(redis_url) as r:
        assert r.exists("sy:req:alpha:more") == 0  # refused: the id may be retried

    # Beta is within its share, and the room is there.
    held.append(asyncio.create_task(client.post("/v1/generate", json=lease_body(20), headers=beta)))
    await until(lambda: len(backend.requests) == 3)
    assert [r.request_class for r in backend.requests] == ["interactive"] * 3  # nobody borrowed

    backend.resume.set()
    assert [(await post).status_code for post in held] == [200] * 3
    # Their leases are released as they end: the refused request now runs under its own id.
    for _ in range(200):
        retried = await client.post("/v1/generate", json=lease_body(30, request_id="more"))
        if retried.status_code != 429:
            break
        await asyncio.sleep(0.01)
    assert retried.status_code == 200
    assert len(backend.requests) == 4


async def test_bulk_is_503_when_the_pool_is_full_while_an_owner_takes_borrowed_room(
    client: httpx.AsyncClient,
    backend: Any,
    make_key: Callable[[str], str],
    lease_body: Callable[..., dict[str, Any]],
    until: Until,
) -> None:
    backend.hold_after = 0
    beta = bearer(make_key("beta"))
    # Beta alone takes 60: beyond its share of 50, so borrowed, and sent at bulk priority.
    borrowed = asyncio.create_task(client.post("/v1/generate", json=lease_body(60), headers=beta))
    await until(lambda: len(backend.requests) == 1)
    assert backend.requests[0].request_class == "bulk"

    full = await client.post("/v1/generate", json=lease_body(50, "bulk"))  # within share; 40 free
    assert full.status_code == 503
    assert (full.json()["error"]["type"], full.json()["error"]["code"]) == ("server_error", "service_unavailable")
    assert "no free KV capacity" in full.json()["error"]["message"]
    assert int(full.headers["retry-after"]) >= 1
    assert len(backend.requests) == 1  # nothing sent to a pool with no room

    # An interactive request within alpha's share is admitted against the borrowed room:
    # the engine preempts the borrower's bulk-priority work for it.
    owner = asyncio.create_task(client.post("/v1/generate", json=lease_body(50)))
    await until(lambda: len(backend.requests) == 2)
    assert backend.requests[1].request_class == "interactive"
    backend.resume.set()
    assert [(await borrowed).status_code, (await owner).status_code] == [200, 200]


async def test_a_pool_with_no_room_refuses_bulk_at_once_and_interactive_after_waiting(
    client: httpx.AsyncClient, backend: Any, capacity: StaticCapacity, lease_body: Callable[..., dict[str, Any]]
) -> None:
    capacity.set("small", 0)  # no ready server
    bulk = await client.post("/v1/generate", json=lease_body(10, "bulk"))
    assert bulk.status_code == 503
    assert int(bulk.headers["retry-after"]) >= 1
    started = time.monotonic()
    interactive = await client.post("/v1/generate", json=lease_body(10))
    waited = time.monotonic() - started
    assert interactive.status_code == 503
    assert int(interactive.headers["retry-after"]) >= 1
    assert "stayed full for 0.3 s" in interactive.json()["error"]["message"]
    assert waited >= 0.25  # it queued for the pool's queue_timeout_s first
    assert backend.requests == []


async def test_a_queued_interactive_request_runs_when_room_appears(
    client: httpx.AsyncClient, backend: Any, capacity: StaticCapacity, lease_body: Callable[..., dict[str, Any]]
) -> None:
    capacity.set("small", 0)
    waiting = asyncio.create_task(client.post("/v1/generate", json=lease_body(10)))
    await asyncio.sleep(0.05)
    capacity.set("small", POOL_TOKENS)  # a server became ready: the queue is woken
    reply = await waiting
    assert reply.status_code == 200, reply.text
    assert len(backend.requests) == 1
