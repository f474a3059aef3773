"""GET /metrics: the gateway's own metrics (not the process-global registry), one view per
gateway however many worker processes serve its port.

With one process the scrape reads the app's registry. With several (`SWITCHYARD_WORKERS` > 1)
each worker writes its metrics to files under `PROMETHEUS_MULTIPROC_DIR` and a scrape, on
whichever worker accepts it, merges them all (serving/metrics_registry.py): counters and
histograms sum over every worker of this start, exited ones included, so they never go
backwards; `requests_in_flight` and `queued_requests` sum over the workers alive now.

Two gauges are read at scrape time. `leased_tokens` comes from Redis and is every gateway's:
it is built for this scrape alone, not summed over workers. `queued_requests` is this gateway's
fair queues: the scraping worker sets its own, and in multiprocess mode every worker also
publishes its own every `QUEUE_PUBLISH_S`, so the sum is at most that old.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping

from fastapi import APIRouter, FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST
from redis.exceptions import RedisError

from gateway.deps import AdmissionDep, MetricsDep, Services
from quota.admission import Admission, PoolSnapshot
from serving.metrics import GatewayMetrics
from serving.metrics_registry import exposition

QUEUE_PUBLISH_S = 1.0

logger = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def _publishing_queues(app: FastAPI) -> AsyncIterator[None]:
    """Runs inside the app's lifespan (its services built): in multiprocess mode, keep this
    worker's fair-queue lengths in its files, so a scrape on another worker counts them."""
    gateway_metrics, services = app.state.metrics, getattr(app.state, "services", None)
    if not isinstance(gateway_metrics, GatewayMetrics) or gateway_metrics.multiprocess_dir is None:
        yield
        return
    if not isinstance(services, Services):
        raise RuntimeError("the /metrics router's lifespan needs app.state.services (the app's lifespan first)")
    task = asyncio.create_task(_publish_queues(gateway_metrics, services.admission), name="queue-gauge")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _publish_queues(gateway_metrics: GatewayMetrics, admission: Admission) -> None:
    while True:
        gateway_metrics.observe_queues(_queued(admission.snapshot()))
        await asyncio.sleep(QUEUE_PUBLISH_S)


router = APIRouter(tags=["metrics"], lifespan=_publishing_queues)


@router.get("/metrics", response_class=Response)
async def metrics(gateway_metrics: MetricsDep, admission: AdmissionDep) -> Response:
    try:
        pools = await admission.refresh_snapshot()
        leases = [gateway_metrics.leased_tokens({pool_id: pool.leases for pool_id, pool in pools.items()})]
    except RedisError:
        logger.warning("cannot read leases from Redis for /metrics")
        pools, leases = admission.snapshot(), []  # the queues are this process's: still known
    gateway_metrics.observe_queues(_queued(pools))
    return Response(exposition([gateway_metrics.collector()], leases), media_type=CONTENT_TYPE_LATEST)


def _queued(pools: Mapping[str, PoolSnapshot]) -> dict[str, dict[str, int]]:
    return {pool_id: snapshot.queued for pool_id, snapshot in pools.items()}
