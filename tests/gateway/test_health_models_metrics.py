"""GET /healthz, /readyz, /v1/models and /metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from contracts.generation import PoolReadiness
from gateway.app import create_app
from server_host.ports import free_ports


async def test_healthz(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


async def test_readyz_when_every_pool_is_ready(client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ready",
        "pools": [
            {"pool_id": "small", "model_id": "small", "ready": True, "detail": ""},
            {"pool_id": "large", "model_id": "large", "ready": True, "detail": ""},
        ],
        "redis": "reachable",
    }


async def test_readyz_is_503_naming_the_pool_that_is_not(client: httpx.AsyncClient, backend: Any) -> None:
    backend.pools[1] = PoolReadiness("large", "large", False, "model 'llm' not loaded")
    response = await client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not_ready"
    assert body["pools"][1] == {
        "pool_id": "large",
        "model_id": "large",
        "ready": False,
        "detail": "model 'llm' not loaded",
    }


async def test_readyz_is_503_when_redis_does_not_answer(client: httpx.AsyncClient, app: FastAPI) -> None:
    """A gateway cut from Redis admits nothing: its load balancer must send clients elsewhere."""
    services = app.state.services
    silent = redis.asyncio.Redis(port=free_ports(1)[0], socket_connect_timeout=0.5)  # nothing listens
    app.state.services = dataclasses.replace(services, redis=silent)
    try:
        response = await client.get("/readyz")
    finally:
        app.state.services = services
        await silent.aclose()
    assert response.status_code == 503
    assert (response.json()["status"], response.json()["redis"]) == ("not_ready", "unreachable")


async def test_readyz_with_no_pools_is_not_ready(client: httpx.AsyncClient, backend: Any) -> None:
    backend.pools = []
    assert (await client.get("/readyz")).status_code == 503


async def test_models_list(client: httpx.AsyncClient, config_path: Path) -> None:
    built = {m: int((config_path.parent / "models" / m / "tokenizer.json").stat().st_mtime) for m in ("small", "large")}
    response = await client.get("/v1/models")
    assert response.status_code == 200
    assert response.json() == {
        "object": "list",
        "data": [
            {
                "id": "small",
                "object": "model",
                "created": built["small"],
                "owned_by": "switchyard",
                "max_context_tokens": 64,
            },
            {
                "id": "large",
                "object": "model",
                "created": built["large"],
                "owned_by": "switchyard",
                "max_context_tokens": 36864,
            },
        ],
    }


async def test_model_created_is_its_build_time_not_the_time_of_the_call(
    make_app: Callable[[Any], FastAPI], backend: Any, config_path: Path, team_key: str
) -> None:
    built = 1_700_000_000  # as if `switchyard build` wrote the large model's files then
    os.utime(config_path.parent / "models" / "large" / "tokenizer.json", (built, built))
    app = make_app(backend)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {team_key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers) as http:
            assert (await http.get("/v1/models/large")).json()["created"] == built
            assert (await http.get("/v1/models")).json()["data"][1]["created"] == built


async def test_one_model(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/models/large")).json()["max_context_tokens"] == 36864
    missing = await client.get("/v1/models/huge")
    assert missing.status_code == 404
    assert (missing.json()["error"]["type"], missing.json()["error"]["code"]) == ("not_found_error", "model_not_found")


def sample(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return float(found.value)
    raise AssertionError(f"no sample {name}{labels}")


async def test_metrics_count_requests_tokens_and_errors(client: httpx.AsyncClient) -> None:
    await client.post("/v1/generate", json={"model": "small", "prompt": "the fox", "max_tokens": 3})
    await client.post("/v1/generate", json={"model": "small", "prompt": "the fox"})
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    labels = {"model": "small", "request_class": "interactive"}
    assert sample(text, "switchyard_gateway_requests_total", **labels, outcome="length") == 1
    assert sample(text, "switchyard_gateway_tokens_total", **labels, kind="completion") == 4
    assert sample(text, "switchyard_gateway_request_latency_seconds_count", **labels) == 1
    assert sample(text, "switchyard_gateway_time_to_first_token_seconds_count", **labels) == 1
    assert sample(text, "switchyard_gateway_requests_in_flight", **labels) == 0
    errors = sample(text, "switchyard_gateway_errors_total", status="400", type="invalid_request_error")
    assert errors == 1


async def test_each_app_has_its_own_registry(app: FastAPI) -> None:
    other = create_app(app.state.settings)
    assert other.state.metrics.registry is not app.state.metrics.registry


async def test_openapi_documents_the_api(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    assert {"/v1/generate", "/v1/generate/{request_id}", "/v1/models", "/readyz"} <= set(spec["paths"])
    body = spec["components"]["schemas"]["GenerateBody"]
    assert body["required"] == ["model", "prompt", "max_tokens"]
    assert "class" in body["properties"]


async def test_metrics_carry_teams_gaps_admission_and_leases(client: httpx.AsyncClient, backend: Any) -> None:
    """Issue 3's observability: requests per team, inter-token gaps, time in admission, and
    the leases in force (read from Redis at scrape time)."""
    backend.hold_after = 2
    body = {"model": "small", "prompt": "the quick brown fox", "max_tokens": 10, "stream": True}
    running = asyncio.create_task(client.post("/v1/generate", json=body))
    while "switchyard_gateway_leased_tokens{" not in (text := (await client.get("/metrics")).text):
        await asyncio.sleep(0.01)
    assert 'switchyard_gateway_leased_tokens{kind="borrowed",pool="small",team="alpha"}' in text or (
        'switchyard_gateway_leased_tokens{kind="owned",pool="small",team="alpha"}' in text
    )
    backend.resume.set()
    assert (await running).status_code == 200
    text = (await client.get("/metrics")).text
    labels = 'model="small",outcome="length",request_class="interactive",team="alpha"'
    assert f"switchyard_gateway_team_requests_total{{{labels}}} 1.0" in text
    assert 'switchyard_gateway_inter_token_seconds_count{model="small",request_class="interactive"}' in text
    assert 'switchyard_gateway_admission_wait_seconds_count{pool="small",request_class="interactive"} 1.0' in text
    # The lease went back at the end: no tokens in force any more.
    assert 'team="alpha"} 0.0' in text or "switchyard_gateway_leased_tokens{" not in text
