"""Per-key caps: one key's requests and streams in flight are bounded (429 with Retry-After
beyond), other keys are untouched, and a slot comes back when its response ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from contracts.errors import ApiError
from gateway.key_slots import KeySlots
from quota.stream_shares import StreamShares
from tests.gateway.conftest import wait_until

STREAM = {"model": "small", "prompt": "the fox", "max_tokens": 9, "stream": True}


@pytest.fixture
def config_path(config_path: Path) -> Path:
    caps = "gateway: {max_requests_per_key: 3, max_streams_per_key: 2}\n"
    config_path.write_text(config_path.read_text() + caps)
    return config_path


@pytest.fixture
async def other_team(app: FastAPI, make_key: Callable[[str], str]) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {make_key('beta')}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers) as http:
        yield http


async def held(client: httpx.AsyncClient, backend: Any, body: dict[str, Any], count: int) -> list[asyncio.Task[Any]]:
    """`count` more requests of `body`, each held by the backend after its first delta (the
    in-process transport answers once a response ends)."""
    expected = len(backend.requests) + count
    tasks = [asyncio.create_task(client.post("/v1/generate", json=body)) for _ in range(count)]
    await wait_until(lambda: len(backend.requests) == expected)
    return tasks


async def test_streams_beyond_the_key_cap_get_429_others_go_on(
    client: httpx.AsyncClient, other_team: httpx.AsyncClient, backend: Any
) -> None:
    backend.hold_after = 1
    streams = await held(client, backend, STREAM, 2)
    refused = await asyncio.wait_for(client.post("/v1/generate", json=STREAM), timeout=10)  # uncapped: held
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "5"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert "2 streams" in refused.json()["error"]["message"]
    assert len(backend.requests) == 2  # refused before it started anything
    # Not a stream: still within the key's 3 requests.
    assert (await client.get("/v1/models")).status_code == 200
    # Another team's key has caps of its own.
    streams += await held(other_team, backend, STREAM, 1)
    backend.resume.set()
    assert [r.status_code for r in await asyncio.gather(*streams)] == [200, 200, 200]
    assert (await client.post("/v1/generate", json=STREAM)).status_code == 200  # its slots came back


async def test_requests_beyond_the_key_cap_get_429_before_the_body(
    client: httpx.AsyncClient, backend: Any, app: FastAPI
) -> None:
    backend.hold_after = 1
    whole = {**STREAM, "stream": False}
    requests = await held(client, backend, whole, 3)
    slots = app.state.edge.slots
    assert isinstance(slots, KeySlots)

    refused = await asyncio.wait_for(
        client.post("/v1/generate", content=b"{not even json", headers={"Content-Type": "application/json"}), timeout=10
    )
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "5"
    assert "3 requests" in refused.json()["error"]["message"]
    backend.resume.set()
    assert [r.status_code for r in await asyncio.gather(*requests)] == [200, 200, 200]
    assert (await client.get("/v1/models")).status_code == 200


def test_each_worker_takes_its_share_of_the_caps() -> None:
    shares = StreamShares(100, {"t": 1})
    slots = KeySlots.per_worker(max_requests=10, max_streams=5, workers=4, retry_after_s=1, streams=shares)
    assert (slots.max_requests, slots.max_streams) == (3, 2)
    first = slots.acquire("k", "t")
    assert first is not None
    first.open_stream()
    second = slots.acquire("k", "t")
    assert second is not None
    second.open_stream()
    third = slots.acquire("k", "t")
    assert third is not None
    with pytest.raises(ApiError) as refused:
        third.open_stream()
    assert refused.value.status_code == 429 and "2 streams" in refused.value.message
    assert slots.acquire("k", "t") is None
    assert slots.in_flight("k") == (3, 2)
    assert shares.total == 2  # the refused stream took no team slot
    first.release()
    first.release()  # once only
    assert slots.in_flight("k") == (2, 1) and shares.total == 1
    for slot in (second, third):
        slot.release()
    assert slots.in_flight("k") == (0, 0) and shares.total == 0


def test_a_team_past_its_share_of_the_worker_s_streams_is_429_and_a_full_worker_503() -> None:
    shares = StreamShares(10, {"flood": 1, "bystander": 1}, reserve_fraction=0.2)
    slots = KeySlots(max_requests=100, max_streams=100, retry_after_s=2, streams=shares)
    held = []
    for _ in range(8):  # the flood borrows up to 10 − 2 reserved
        slot = slots.acquire("flood-key", "flood")
        assert slot is not None
        slot.open_stream()
        held.append(slot)
    over = slots.acquire("flood-key", "flood")
    assert over is not None
    with pytest.raises(ApiError) as refused:
        over.open_stream()
    error = refused.value
    assert (error.status_code, error.headers["Retry-After"], error.code) == (429, "2", "team_streams_over_share")
    assert "team 'flood' holds 8 streams" in error.message and "share of 5" in error.message
    over.release()
    for _ in range(2):  # the bystander finds the reserve
        slot = slots.acquire("bystander-key", "bystander")
        assert slot is not None
        slot.open_stream()
        held.append(slot)
    full = slots.acquire("bystander-key", "bystander")
    assert full is not None
    with pytest.raises(ApiError) as refused:
        full.open_stream()
    assert (refused.value.status_code, refused.value.code) == (503, "gateway_streams_full")
    assert refused.value.headers["Retry-After"] == "2"
    full.release()
    for slot in held:
        slot.release()
    assert shares.total == 0
