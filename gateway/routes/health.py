"""Liveness and readiness, for the supervisor and the load balancer in front."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from contracts.schemas import PoolStatus, ReadinessBody
from gateway.deps import BackendDep, services_of

# A readiness probe answers within this, Redis or not (load balancers probe every few seconds).
REDIS_PING_TIMEOUT_S = 1.0

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up and serving HTTP; says nothing about the model servers."""
    return {"status": "ok"}


@router.get("/readyz", response_model=ReadinessBody, responses={503: {"model": ReadinessBody}})
async def readyz(request: Request, backend: BackendDep) -> JSONResponse:
    """200 when every pool's Triton server is ready with its models loaded and Redis answers;
    503 with each pool's state and Redis's otherwise."""
    pools = [
        PoolStatus(pool_id=p.pool_id, model_id=p.model_id, ready=p.ready, detail=p.detail)
        for p in await backend.readiness()
    ]
    reachable = await _pings(services_of(request).redis)
    ready = bool(pools) and all(p.ready for p in pools) and reachable
    body = ReadinessBody(
        status="ready" if ready else "not_ready", pools=pools, redis="reachable" if reachable else "unreachable"
    )
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


async def _pings(client: aioredis.Redis) -> bool:
    try:
        return bool(await asyncio.wait_for(client.ping(), REDIS_PING_TIMEOUT_S))
    except (aioredis.RedisError, OSError, TimeoutError):
        return False
