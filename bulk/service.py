"""`switchyard dispatcher` (and `python -m bulk`): the dispatcher process and its connections.

It needs Redis (batches, queue, leases), the blob store, the models' tokenizers (to re-read
entries as the gateway validated them), every pool's metrics (capacity) and a gateway with the
admin key (entries run through the same routes, admission and metering as everyone's).
Beside the dispatcher it runs the retention sweep (expired files and batches go).
SIGTERM or Ctrl-C: it stops releasing, lets running entries end and writes their results; a
chunk it still held goes to the next dispatcher after `bulk.reclaim_idle_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid

import httpx
from prometheus_client import start_http_server

from bulk.blob_store import LocalBlobStore
from bulk.dispatcher import Dispatcher
from bulk.gateway_client import GatewaySubmitter
from bulk.metrics import DispatcherMetrics
from bulk.pool_loads import LivePoolLoads
from config.redis_client import redis_client
from config.settings import SwitchyardConfig
from contracts.catalog import ModelCatalog
from fleet_state.load_board import LoadBoard
from quota.admission import Admission
from quota.capacity import BoardCapacity, CapacityMonitor, config_metrics_urls
from quota.key_files import ADMIN_KEY_ENV, find_admin_key

logger = logging.getLogger(__name__)


async def serve_dispatcher(
    config: SwitchyardConfig, *, gateway_url: str | None = None, admin_key: str | None = None
) -> None:
    """Run until SIGTERM/SIGINT. `gateway_url`: where to submit (None: the file's gateway);
    `admin_key`: the key to submit with (None: var/admin-api-key's)."""
    key = find_admin_key(config.var_path, admin_key)
    if key is None:
        raise SystemExit(f"no admin key: set {ADMIN_KEY_ENV} or run `switchyard up` once to write var/admin-api-key")
    url = gateway_url or f"http://{config.gateway.host}:{config.gateway.port}"
    consumer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    client = redis_client(config, "dispatcher", socket_timeout=10)
    timeout = httpx.Timeout(connect=5.0, read=None, write=30.0, pool=None)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with (
        httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as gateway,
        httpx.AsyncClient() as scraper,
    ):
        servers = config.network.servers.advertised  # where a pool's configured servers listen
        configured = CapacityMonitor(
            lambda: config_metrics_urls(config, servers), scraper, config.quota.capacity_refresh_s
        )
        monitor = BoardCapacity(
            LoadBoard(client),
            list(config.pools),
            configured,
            dead_after_s=config.fleet.dead_after_s,
            refresh_s=config.quota.capacity_refresh_s,
        )
        await monitor.refresh()
        polling = asyncio.create_task(monitor.run(), name="capacity-monitor")
        leases = Admission(config, client, monitor).store
        metrics = DispatcherMetrics()
        if config.bulk.metrics_port:
            try:
                start_http_server(config.bulk.metrics_port, addr=config.gateway.host, registry=metrics.registry)
            except OSError as exc:  # another dispatcher on this host has it: run on, unobserved
                logger.error("dispatcher metrics not served on port %d: %s", config.bulk.metrics_port, exc)
        dispatcher = Dispatcher(
            config,
            client,
            LocalBlobStore(config.blob_path),
            ModelCatalog.load(config),
            GatewaySubmitter(gateway, key),
            LivePoolLoads(monitor, leases),
            consumer=consumer,
            metrics=metrics,
        )
        logger.info("dispatcher started", extra={"consumer": consumer, "gateway": url})
        # Expired files and batches go (bulk/retention.py); one dispatcher sweeps at a time.
        sweeping = asyncio.create_task(dispatcher.retention.run(stop), name="retention")
        try:
            await dispatcher.run(stop)
        finally:
            polling.cancel()
            sweeping.cancel()
            for task in (polling, sweeping):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await client.aclose()
    logger.info("dispatcher stopped", extra={"consumer": consumer})
