"""A model server's refusal of a request's input, on the real `tritonserver`: the caller's 400,
never a failover and never a server taken out of routing for the other teams.

The gateway's edge refuses every value the engine would (contracts/field_checks.py), so the
refused request is sent straight through the backend here, as one that slipped past would be.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import replace

import httpx
import pytest
import tritonclient.grpc.aio as grpcclient

from contracts.generation import GenerationRequest, PoolReadiness, RequestRejected
from router.failover_backend import FailoverBackend
from router.triton_backend import TritonBackend
from tests.integration.conftest import LiveGateway, TritonPool

pytestmark = pytest.mark.integration


class OneServer:
    """A picker over the pool's one server that remembers what it was told."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.failed: list[bool] = []

    def pick(self, request: GenerationRequest, exclude: Collection[str]) -> str | None:
        suspect = any(self.failed)  # a server marked failed is not routed to until a scrape
        return None if suspect or self.server in exclude else self.server

    def started(self, server_id: str, request: GenerationRequest) -> None:
        pass

    def ended(self, server_id: str, request: GenerationRequest, failed: bool) -> None:
        self.failed.append(failed)

    async def readiness(self) -> list[PoolReadiness]:
        return []


async def _run(triton_pool: TritonPool) -> tuple[OneServer, list[str], str]:
    client = grpcclient.InferenceServerClient(triton_pool.grpc_url)
    streams = TritonBackend({"s1": client}, {"s1": triton_pool.model_id}, headers=triton_pool.headers)
    picker = OneServer("s1")
    backend = FailoverBackend(picker, streams)
    good = GenerationRequest(request_id="team-b/r1", model_id=triton_pool.model_id, prompt="hello", max_tokens=4)
    # 1e-50 is 0.0 as FP32: the engine refuses top_p 0.
    refused = replace(good, request_id="team-a/r1", top_p=1e-50)
    reasons: list[str] = []
    try:
        with pytest.raises(RequestRejected) as raised:
            async for _ in backend.generate(refused):
                pass
        reasons.append(raised.value.detail)
        text = "".join([delta.text async for delta in backend.generate(good)])
    finally:
        await backend.close()
    return picker, reasons, text


def test_a_refused_input_is_the_callers_and_the_server_stays_routable(triton_pool: TritonPool) -> None:
    picker, reasons, text = asyncio.run(_run(triton_pool))
    assert len(reasons) == 1 and "top_p must be in (0, 1]" in reasons[0]
    assert picker.failed == [False, False]  # the refusal marked nothing failed
    assert text  # another team's next request on the same server is served


def test_the_gateway_answers_a_value_the_engine_would_refuse_with_a_400(live_gateway: LiveGateway) -> None:
    url = f"{live_gateway.url}/v1/generate"
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 4}
    with httpx.Client(timeout=60) as http:
        refused = http.post(url, json={**body, "top_p": 1e-50}, headers=live_gateway.headers)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "top_p"
        other = {"Authorization": f"Bearer {live_gateway.other_key}"}
        served = http.post(url, json=body, headers=other)
        assert served.status_code == 200, served.text
