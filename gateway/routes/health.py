"""Liveness and readiness, for the supervisor and the load balancer in front."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from contracts.schemas import PoolStatus, ReadinessBody
from gateway.deps import BackendDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up and serving HTTP; says nothing about the model servers."""
    return {"status": "ok"}


@router.get("/readyz", response_model=ReadinessBody, responses={503: {"model": ReadinessBody}})
async def readyz(backend: BackendDep) -> JSONResponse:
    """200 when every pool's Triton server is ready with its models loaded; 503 with each
    pool's state otherwise."""
    pools = [
        PoolStatus(pool_id=p.pool_id, model_id=p.model_id, ready=p.ready, detail=p.detail)
        for p in await backend.readiness()
    ]
    ready = bool(pools) and all(p.ready for p in pools)
    body = ReadinessBody(status="ready" if ready else "not_ready", pools=pools)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
