"""Levels of service at the edge (docs/tiers.md): entitlements (403 naming the granted tiers),
`service_tier` on the OpenAI routes (taken, and echoed whole and streamed), the four classes on
`/v1/generate`, and the latency-target headers reaching the servers' request."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.auth_headers import bearer

from .conftest import FakeBackend, parse_sse

pytestmark = pytest.mark.usefixtures("chat_template")

COMPLETION = {"model": "small", "prompt": "hello", "max_tokens": 3}
CHAT = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
GENERATE = {"model": "small", "prompt": "hello", "max_tokens": 3}


@pytest.fixture
def config_path(config_path: Path) -> Path:
    """The gateway tests' config and two teams with entitlements: gamma may use priority and
    default; delta flex and batch (flex by default)."""
    text = config_path.read_text().replace(
        "teams:\n",
        "teams:\n"
        "  gamma: {weight: 1, tiers: {priority: 2, default: 1}}\n"
        "  delta: {weight: 1, default_class: flex, tiers: {flex: 1, batch: 1}}\n",
    )
    config_path.write_text(text)
    return config_path


@pytest.fixture
async def as_team(app: FastAPI, make_key: Callable[[str], str]) -> AsyncIterator[Callable[[str], httpx.AsyncClient]]:
    """`as_team(name)`: a client of the app with that team's key."""
    clients: list[httpx.AsyncClient] = []

    def make(team: str) -> httpx.AsyncClient:
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gateway", headers=bearer(make_key(team))
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


async def test_a_tier_the_team_is_not_granted_is_a_403_naming_its_tiers(
    as_team: Callable[[str], httpx.AsyncClient], backend: FakeBackend
) -> None:
    delta = as_team("delta")
    for path, body, param in (
        ("/v1/completions", {**COMPLETION, "service_tier": "priority"}, "service_tier"),
        ("/v1/chat/completions", {**CHAT, "service_tier": "default"}, "service_tier"),
        ("/v1/generate", {**GENERATE, "class": "interactive"}, "class"),
    ):
        response = await delta.post(path, json=body)
        assert response.status_code == 403, response.text
        error = response.json()["error"]
        assert error["param"] == param
        assert "flex, batch" in error["message"] and "teams.<team>.tiers" in error["message"]
    # A team without `tiers` has default, flex and batch: priority must be granted by name.
    alpha = as_team("alpha")
    response = await alpha.post("/v1/completions", json={**COMPLETION, "service_tier": "priority"})
    assert response.status_code == 403
    assert "default, flex, batch" in response.json()["error"]["message"]
    assert backend.requests == []  # nothing refused reached a server


async def test_the_tier_that_served_is_echoed_whole_and_streamed(
    as_team: Callable[[str], httpx.AsyncClient], backend: FakeBackend
) -> None:
    gamma, delta = as_team("gamma"), as_team("delta")
    whole = await gamma.post("/v1/chat/completions", json={**CHAT, "service_tier": "priority"})
    assert whole.status_code == 200, whole.text
    assert whole.json()["service_tier"] == "priority"
    assert backend.requests[-1].request_class == "priority"

    auto = await delta.post("/v1/completions", json={**COMPLETION, "service_tier": "auto"})
    assert auto.json()["service_tier"] == "flex"  # the team's default class
    assert backend.requests[-1].request_class == "flex"

    streamed = await gamma.post("/v1/chat/completions", json={**CHAT, "stream": True})
    chunks = [data for _, data in parse_sse(streamed.text) if isinstance(data, dict)]
    assert chunks and {chunk["service_tier"] for chunk in chunks} == {"default"}


async def test_service_tier_and_the_class_header_must_agree(as_team: Callable[[str], httpx.AsyncClient]) -> None:
    gamma = as_team("gamma")
    response = await gamma.post(
        "/v1/completions",
        json={**COMPLETION, "service_tier": "priority"},
        headers={"X-Switchyard-Class": "interactive"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "service_tier"
    same = await gamma.post(
        "/v1/completions", json={**COMPLETION, "service_tier": "priority"}, headers={"X-Switchyard-Class": "priority"}
    )
    assert same.status_code == 200 and same.json()["service_tier"] == "priority"


@pytest.mark.parametrize("tier", ["scale", "batch", "", 1])
async def test_an_unknown_service_tier_is_a_400(as_team: Callable[[str], httpx.AsyncClient], tier: Any) -> None:
    response = await as_team("gamma").post("/v1/completions", json={**COMPLETION, "service_tier": tier})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "service_tier"


async def test_generate_takes_the_four_classes_and_the_latency_targets(
    as_team: Callable[[str], httpx.AsyncClient], backend: FakeBackend
) -> None:
    gamma = as_team("gamma")
    response = await gamma.post(
        "/v1/generate", json={**GENERATE, "class": "priority"}, headers={"x-slo-ttft-ms": "800"}
    )
    assert response.status_code == 200, response.text
    assert backend.requests[-1].request_class == "priority"
    assert backend.requests[-1].slo_ttft_ms == 800  # sent to the server: its deadline order
    # The body's field wins over the header.
    await gamma.post("/v1/generate", json={**GENERATE, "slo_ttft_ms": 300}, headers={"x-slo-ttft-ms": "800"})
    assert backend.requests[-1].slo_ttft_ms == 300
    chat = await gamma.post("/v1/chat/completions", json=CHAT, headers={"x-slo-ttft-ms": "1200"})
    assert chat.status_code == 200
    assert backend.requests[-1].slo_ttft_ms == 1200


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "3600001", "soon"])
async def test_a_latency_target_out_of_range_is_a_400_naming_the_header(
    as_team: Callable[[str], httpx.AsyncClient], backend: FakeBackend, value: str
) -> None:
    for path, body in (("/v1/generate", GENERATE), ("/v1/completions", COMPLETION)):
        response = await as_team("gamma").post(path, json=body, headers={"x-slo-tpot-ms": value})
        assert response.status_code == 400, (path, value, response.text)
        error = response.json()["error"]
        assert error["param"] == "header.x-slo-tpot-ms", error  # where FastAPI names a header
        assert error["message"].startswith("'header.x-slo-tpot-ms': Input should be"), error
    body_field = await as_team("gamma").post("/v1/generate", json={**GENERATE, "slo_ttft_ms": 0})
    assert body_field.status_code == 400
    assert backend.requests == []


class SlowFleet(FakeBackend):
    """A backend whose router predicts every first token `predicted_s` away."""

    predicted_s = 3.0

    def predicted_ttft_s(self, model_id: str, request_tokens: int, prefix_block_hashes: Sequence[int]) -> float | None:
        return self.predicted_s


async def test_a_flex_target_no_server_can_meet_is_refused_at_once_and_priority_runs_as_a_miss(
    make_app: Callable[[FakeBackend], FastAPI], make_key: Callable[[str], str]
) -> None:
    backend = SlowFleet()
    app = make_app(backend)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://g", headers=bearer(make_key("delta"))) as delta,
            httpx.AsyncClient(transport=transport, base_url="http://g", headers=bearer(make_key("gamma"))) as gamma,
        ):
            refused = await delta.post(
                "/v1/generate", json={**GENERATE, "class": "flex"}, headers={"x-slo-ttft-ms": "500"}
            )
            assert refused.status_code == 429, refused.text
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "flex_capacity_unavailable"
            assert "3000 ms" in refused.json()["error"]["message"]
            met = await delta.post(
                "/v1/generate", json={**GENERATE, "class": "flex"}, headers={"x-slo-ttft-ms": "5000"}
            )
            assert met.status_code == 200  # a target the fleet can meet runs
            missed = await gamma.post(
                "/v1/generate", json={**GENERATE, "class": "priority"}, headers={"x-slo-ttft-ms": "500"}
            )
            assert missed.status_code == 200  # still admitted ...
            metrics = await gamma.get("/metrics")
            # ... and counted as a miss, as the refused flex request was.
            assert 'switchyard_gateway_slo_unmeetable_total{service_tier="priority"} 1.0' in metrics.text
            assert 'switchyard_gateway_slo_unmeetable_total{service_tier="flex"} 1.0' in metrics.text
    assert [request.request_class for request in backend.requests] == ["flex", "priority"]
