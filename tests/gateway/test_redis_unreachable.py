"""A request that finds Redis unreachable (restarting, failing over) is a 503 with Retry-After
in OpenAI's error shape, not a 500 (the chaos run's restart-redis fault: POST /v1/generate
answered "the gateway failed; see its log", and batch entries failed on it)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import redis
from fastapi import FastAPI

from gateway.error_handlers import install_error_handlers


@pytest.mark.parametrize(
    "error",
    [
        redis.ConnectionError("Error UNKNOWN while writing to socket. Connection lost."),
        redis.BusyLoadingError("Redis is loading the dataset in memory"),
        redis.TimeoutError("Timeout reading from socket"),
    ],
)
async def test_an_unreachable_redis_is_a_retryable_503(error: redis.RedisError) -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/generate")
    async def generate() -> None:
        raise error

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        reply = await client.post("/v1/generate")
    assert reply.status_code == 503
    assert reply.headers["retry-after"] == "1"
    assert reply.json()["error"]["code"] == "service_unavailable"


async def test_any_other_failure_is_still_a_500() -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/generate")
    async def generate() -> None:
        raise redis.ResponseError("WRONGTYPE")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        reply = await client.post("/v1/generate")
    assert reply.status_code == 500


async def test_a_claim_taken_before_redis_went_away_is_let_go_for_the_retry(
    app: FastAPI, client: httpx.AsyncClient, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis fails between the request id's claim and admission (a failover, say): the 503's
    retry must generate, not wait on a claim that nothing runs under (the chaos run's
    failover-redis: a batch entry's retry attached to such a claim)."""
    admission = app.state.services.admission
    admit = admission.admit
    failures = [redis.ConnectionError("Connection reset by peer")]

    async def admit_once_unreachable(*args: object, **kwargs: object) -> object:
        if failures:
            raise failures.pop()
        return await admit(*args, **kwargs)

    monkeypatch.setattr(admission, "admit", admit_once_unreachable)
    body = {"model": "small", "prompt": "the quick brown fox", "max_tokens": 4, "request_id": "r-1"}
    assert (await client.post("/v1/generate", json=body)).status_code == 503
    with redis.Redis.from_url(redis_url) as admin:
        deadline = asyncio.get_running_loop().time() + 10
        while admin.exists("sy:req:alpha:r-1"):  # let go in the background
            assert asyncio.get_running_loop().time() < deadline, "the claim was never let go"
            await asyncio.sleep(0.02)
    reply = await client.post("/v1/generate", json=body)
    assert reply.status_code == 200 and reply.json()["text"] == "Hello, world"
