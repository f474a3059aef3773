"""GET /metrics: the gateway's own Prometheus registry (not the process-global one).

Leases are read from Redis at scrape time, so the gauges show every gateway's leases; the
queue gauge is this process's. (With several worker processes each serves its own registry:
scrape them as separate targets, or aggregate the per-team usage counters, which sum.)
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.exceptions import RedisError

from gateway.deps import AdmissionDep, MetricsDep
from gateway.metrics import GatewayMetrics
from quota.admission import Admission

router = APIRouter(tags=["metrics"])
logger = logging.getLogger(__name__)


@router.get("/metrics", response_class=Response)
async def metrics(gateway_metrics: MetricsDep, admission: AdmissionDep) -> Response:
    await _observe_leases(gateway_metrics, admission)
    return Response(generate_latest(gateway_metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def _observe_leases(gateway_metrics: GatewayMetrics, admission: Admission) -> None:
    try:
        pools = await admission.refresh_snapshot()
    except RedisError:
        logger.warning("cannot read leases from Redis for /metrics")
        return
    gateway_metrics.leased_tokens.clear()
    gateway_metrics.queued_requests.clear()
    for pool_id, snapshot in pools.items():
        for team, load in snapshot.leases.items():
            gateway_metrics.leased_tokens.labels(pool_id, team, "owned").set(load.owned_tokens)
            gateway_metrics.leased_tokens.labels(pool_id, team, "borrowed").set(load.borrowed_tokens)
        for team, queued in snapshot.queued.items():
            gateway_metrics.queued_requests.labels(pool_id, team).set(queued)
