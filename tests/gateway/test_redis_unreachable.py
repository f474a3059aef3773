"""A request that finds Redis unreachable (restarting, failing over) is a 503 with Retry-After
in OpenAI's error shape, not a 500 (the chaos run's restart-redis fault: POST /v1/generate
answered "the gateway failed; see its log", and batch entries failed on it)."""

from __future__ import annotations

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
