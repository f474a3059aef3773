"""GET /metrics: the gateway's own Prometheus registry (not the process-global one)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.deps import MetricsDep

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
async def metrics(gateway_metrics: MetricsDep) -> Response:
    return Response(generate_latest(gateway_metrics.registry), media_type=CONTENT_TYPE_LATEST)
