"""One team's flood is that team's 429, never another team's 5xx or stall: on the real app with
real Redis (the FakeBackend holds the flood's replies open).

- A few hundred concurrent streams from one key, below its caps: every one is served, and the
  gateway's Redis connections stay within its bounded pools (redis-py's default pool of 100
  failed the 101st concurrent command with "Too many connections", a 503 for every team).
- A team past its share of the worker's streams is 429 at once; another team still gets the
  reserve; past the worker's maximum, 503; every refusal carries Retry-After.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml
from fastapi import FastAPI

from config.settings import load_config
from contracts.generation import GenerationDelta, GenerationRequest
from gateway.app import WAITING_CONNECTIONS

from .conftest import FakeBackend

FLOOD = 300
Until = Callable[..., Any]


class FloodBackend(FakeBackend):
    """Holds every reply whose prompt says "flood" after its first delta, until `resume`."""

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        if "flood" not in request.prompt:
            async for delta in super().generate(request):
                yield delta
            return
        self.requests.append(request)
        yield GenerationDelta(text="Hello", token_ids=(5,))
        await self.resume.wait()
        yield GenerationDelta(text=" world", token_ids=(6,), finish_reason="length")


@pytest.fixture
def backend() -> FakeBackend:
    return FloodBackend()


def with_gateway(config_path: Path, **gateway: object) -> None:
    raw = yaml.safe_load(config_path.read_text())
    raw["gateway"] = {**raw.get("gateway", {}), **gateway}
    config_path.write_text(yaml.safe_dump(raw))


def body(prompt: str) -> dict[str, object]:
    return {"model": "small", "prompt": prompt, "max_tokens": 2, "stream": True}


def gateway_connections(redis_url: str) -> int:
    """The Redis connections the gateway's user holds now (CLIENT LIST, as the server sees them)."""
    with redis.Redis.from_url(redis_url) as admin:
        return sum(1 for client in admin.client_list() if client.get("user") == "gateway")


async def test_hundreds_of_concurrent_streams_from_one_key_are_served_within_bounded_connections(
    app: FastAPI,
    client: httpx.AsyncClient,
    make_key: Callable[[str], str],
    backend: FakeBackend,
    redis_url: str,
    config_path: Path,
    until: Until,
) -> None:
    bystander = {"Authorization": f"Bearer {make_key('beta')}"}
    flood = [asyncio.create_task(client.post("/v1/generate", json=body(f"flood {i}"))) for i in range(FLOOD)]
    most = 0

    def all_held() -> bool:
        nonlocal most
        most = max(most, gateway_connections(redis_url))
        return len(backend.requests) == FLOOD or any(task.done() for task in flood)

    await until(all_held, 60)
    assert not any(task.done() for task in flood), [t.result().text for t in flood if t.done()][:3]
    started = time.monotonic()
    served = await client.post("/v1/generate", json=body("the quick brown fox") | {"stream": False}, headers=bystander)
    assert served.status_code == 200, served.text
    assert time.monotonic() - started < 5.0  # generous on a loaded machine; the bench measures it
    backend.resume.set()
    replies = await asyncio.gather(*flood)
    assert [r.status_code for r in replies] == [200] * FLOOD, {r.status_code: r.text for r in replies}
    bound = load_config(config_path).redis.max_connections + WAITING_CONNECTIONS
    assert most <= bound, f"{most} connections of the gateway's user, over its pools' {bound}"


async def test_a_team_past_its_share_of_streams_is_429_the_other_finds_room_and_a_full_worker_503(
    config_path: Path,
    make_app: Callable[[FakeBackend], FastAPI],
    backend: FakeBackend,
    make_key: Callable[[str], str],
    until: Until,
) -> None:
    # alpha and beta weigh the same: 20 streams each of 40; borrowing stops at 40 - 10.
    with_gateway(config_path, max_streams_per_worker=40, stream_reserve_fraction=0.25)
    application = make_app(backend)
    transport = httpx.ASGITransport(app=application)
    alpha = {"Authorization": f"Bearer {make_key('alpha')}"}
    beta = {"Authorization": f"Bearer {make_key('beta')}"}
    async with (
        application.router.lifespan_context(application),
        httpx.AsyncClient(transport=transport, base_url="http://gateway") as client,
    ):
        held = [
            asyncio.create_task(client.post("/v1/generate", json=body(f"flood {i}"), headers=alpha)) for i in range(30)
        ]
        await until(lambda: len(backend.requests) == 30, 30)
        for _ in range(3):  # alpha past its share, the worker past the borrowing limit
            started = time.monotonic()
            refused = await client.post("/v1/generate", json=body("flood more"), headers=alpha)
            assert refused.status_code == 429, refused.text
            assert time.monotonic() - started < 1.0  # in memory, before any Redis work
            assert refused.headers["retry-after"].isdigit()
            assert refused.json()["error"]["code"] == "team_streams_over_share"
        held += [
            asyncio.create_task(client.post("/v1/generate", json=body(f"flood b{i}"), headers=beta)) for i in range(10)
        ]
        await until(lambda: len(backend.requests) == 40, 30)
        assert not any(task.done() for task in held)  # beta got the reserve: nothing refused
        full = await client.post("/v1/generate", json=body("flood full"), headers=beta)
        assert full.status_code == 503, full.text
        assert full.json()["error"]["code"] == "gateway_streams_full" and full.headers["retry-after"].isdigit()
        whole = await client.post("/v1/generate", json=body("not streamed") | {"stream": False}, headers=alpha)
        assert whole.status_code == 200  # a whole reply holds no stream slot
        backend.resume.set()
        assert [r.status_code for r in await asyncio.gather(*held)] == [200] * 40
        again = await client.post("/v1/generate", json=body("after the flood"), headers=alpha)
        assert again.status_code == 200  # every slot was given back
