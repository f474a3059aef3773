"""One /metrics per gateway, against real processes: `python -m gateway` with two uvicorn
workers on one port (real Redis; the Triton backend, with no server behind it, so every pool
has no capacity). A request is counted by whichever worker accepts it; every scrape, whichever
worker takes it, must show the sum, and a worker killed and replaced must not take the count
backwards. Requests queued for room in both workers' fair queues add up the same way."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from config.settings import load_config
from gateway.server import serve
from gateway.settings import GatewaySettings
from server_host.ports import free_ports
from server_host.process import ManagedProcess, wait_until
from serving.metrics_registry import MULTIPROC_DIR_ENV

# A generation request the gateway refuses (no max_tokens): a 400, counted by the worker that
# took it, with no model server needed.
BAD_BODY = {"model": "small", "prompt": "the fox"}
ERRORS = "switchyard_gateway_errors_total"
ERROR_LABELS = {"status": "400", "type": "invalid_request_error"}
# A request admission can only queue (the pool has no capacity) until QUEUE_TIMEOUT_S.
GOOD_BODY = {"model": "small", "prompt": "the fox", "max_tokens": 3}
QUEUED = "switchyard_gateway_queued_requests"
QUEUE_TIMEOUT_S = 8.0
BATCH = 8  # requests sent at once: while one worker is busy the other accepts
SCRAPES = 20
POLL_S = 0.02
DEADLINE_S = 90.0  # generous: two workers import the app on a small, shared machine


@dataclass(frozen=True)
class Gateway:
    url: str
    metrics_dir: Path  # the workers' PROMETHEUS_MULTIPROC_DIR
    headers: dict[str, str]


@pytest.fixture
def gateway(config_path: Path, team_key: str, admin_key: str) -> Iterator[Gateway]:
    slow_queue = config_path.read_text().replace("queue_timeout_s: 0.3", f"queue_timeout_s: {QUEUE_TIMEOUT_S}")
    assert slow_queue != config_path.read_text()
    config_path.write_text(slow_queue)
    (port,) = free_ports(1)
    env = {key: value for key, value in os.environ.items() if key != MULTIPROC_DIR_ENV}
    env.update(SWITCHYARD_CONFIG=str(config_path), SWITCHYARD_PORT=str(port), SWITCHYARD_WORKERS="2")
    var_path = load_config(config_path).var_path
    process = ManagedProcess("gateway", [sys.executable, "-m", "gateway"], var_path / "logs" / "gw.log", env=env)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    with process:
        assert wait_until(lambda: healthy() or not process.alive(), DEADLINE_S), process.log_tail()
        assert process.alive(), process.log_tail()
        yield Gateway(url, var_path / "run" / f"prometheus-gateway-{port}", {"Authorization": f"Bearer {team_key}"})


def by_worker(metrics_dir: Path, kind: str, name: str, labels: dict[str, str]) -> dict[int, float]:
    """Each worker's (by pid) nonzero value of one sample, read from its own `kind` file."""
    found_by_pid = {}
    for path in metrics_dir.glob(f"{kind}_*.db"):
        pid = int(path.stem.rsplit("_", 1)[1])
        for metric in MultiProcessCollector.merge([str(path)]):  # type: ignore[no-untyped-call]
            for found in metric.samples:
                if found.name == name and found.labels == labels and found.value > 0:
                    found_by_pid[pid] = found.value
    return found_by_pid


def counted_by_worker(metrics_dir: Path) -> dict[int, float]:
    """The 400s each worker counted."""
    return by_worker(metrics_dir, "counter", ERRORS, ERROR_LABELS)


def queued_by_worker(metrics_dir: Path) -> dict[int, float]:
    """The requests each worker holds in the small pool's queue, as it last published them."""
    return by_worker(metrics_dir, "gauge_livesum", QUEUED, {"pool": "small", "team": "alpha"})


class Client:
    """Sends each request on a new connection: a new accept, which either worker may take.
    Scrapes go through `scraper` (`http` unless given)."""

    def __init__(self, gateway: Gateway, http: httpx.AsyncClient, scraper: httpx.AsyncClient | None = None) -> None:
        self.gateway = gateway
        self.http = http
        self.scraper = scraper or http
        self.sent = 0
        self.scraped: list[float] = []

    async def send(self, count: int = BATCH) -> None:
        replies = await asyncio.gather(*(self.http.post("/v1/generate", json=BAD_BODY) for _ in range(count)))
        assert [reply.status_code for reply in replies] == [400] * count
        self.sent += count

    async def scrape(self, name: str = ERRORS, labels: dict[str, str] = ERROR_LABELS) -> float:
        """One sample of a scrape (0 if absent); the count of 400s is kept to check its order."""
        reply = await self.scraper.get("/metrics")
        assert reply.status_code == 200
        families = list(text_string_to_metric_families(reply.text))
        names = [family.name for family in families]
        assert len(names) == len(set(names)), "a metric family appears twice"
        samples = [found for family in families for found in family.samples]
        assert not [found for found in samples if "pid" in found.labels], "a gauge is shown per worker"
        values = {found.name: found.value for found in samples if found.labels == labels}
        if name == ERRORS:
            self.scraped.append(values[ERRORS])
        return values.get(name, 0.0)

    async def scrape_until(self, name: str, labels: dict[str, str], value: float, within_s: float) -> None:
        """Scrape until the sample reads `value`."""
        deadline = asyncio.get_running_loop().time() + within_s
        while (found := await self.scrape(name, labels)) != value:
            assert asyncio.get_running_loop().time() < deadline, f"{name}{labels} = {found}, not {value}"
            await asyncio.sleep(POLL_S)

    async def until(self, condition: Callable[[], bool]) -> None:
        """Send batches (scraping after each) until `condition` holds."""
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while not condition():
            assert asyncio.get_running_loop().time() < deadline, (
                f"not reached: {counted_by_worker(self.gateway.metrics_dir)}"
            )
            await self.send()
            assert await self.scrape() == self.sent


@pytest.mark.integration
@pytest.mark.slow
async def test_every_scrape_counts_every_worker_and_never_goes_back(gateway: Gateway) -> None:
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=gateway.url, headers=gateway.headers, limits=limits, timeout=30) as http:
        client = Client(gateway, http)
        await client.until(lambda: len(counted_by_worker(gateway.metrics_dir)) == 2)
        for _ in range(SCRAPES):
            assert await client.scrape() == client.sent

        # Kill one worker: uvicorn starts another under a new pid; the dead one's counts stay.
        workers = counted_by_worker(gateway.metrics_dir)
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        await client.until(lambda: bool(counted_by_worker(gateway.metrics_dir).keys() - workers.keys()))
        for _ in range(SCRAPES):
            assert await client.scrape() == client.sent
        assert counted_by_worker(gateway.metrics_dir)[victim] == workers[victim] > 0

    assert client.scraped == sorted(client.scraped)  # never backwards


@pytest.mark.integration
@pytest.mark.slow
async def test_requests_queued_in_both_workers_add_up(gateway: Gateway) -> None:
    """Each worker publishes its own fair-queue lengths (every second): scrapes that all land
    on one worker (one kept-alive connection, as Prometheus scrapes) see both queues, and 0
    once the requests have left them. Which worker accepts a connection is the kernel's
    choice: batches are sent until one lands on both, for a while; on a machine so loaded that
    one worker took them all, the scrapes still must count what it holds (summing two real
    processes' files is tests/serving/test_metrics_registry.py's)."""
    limits = httpx.Limits(max_keepalive_connections=0)
    async with (
        httpx.AsyncClient(base_url=gateway.url, headers=gateway.headers, limits=limits, timeout=60) as http,
        httpx.AsyncClient(base_url=gateway.url, timeout=60) as scraper,
    ):
        client = Client(gateway, http, scraper)
        queued = {"pool": "small", "team": "alpha"}
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while True:  # until one batch lands on both workers, or for DEADLINE_S
            await client.scrape_until(QUEUED, queued, 0, DEADLINE_S)  # the last batch left every file
            waiting = [asyncio.create_task(http.post("/v1/generate", json=GOOD_BODY)) for _ in range(BATCH)]
            # Within the queue timeout: published at most a second ago, plus a loaded machine.
            await client.scrape_until(QUEUED, queued, BATCH, QUEUE_TIMEOUT_S / 2)
            holding = queued_by_worker(gateway.metrics_dir)
            replies = await asyncio.gather(*waiting)
            assert [reply.status_code for reply in replies] == [503] * BATCH  # the pool stayed full
            if len(holding) == 2 or asyncio.get_running_loop().time() > deadline:
                break
        assert sum(holding.values()) == BATCH
        await client.scrape_until(QUEUED, queued, 0, DEADLINE_S)


def test_a_second_gateway_on_the_port_leaves_the_first_ones_metrics(config_path: Path) -> None:
    """Its start would empty the metrics folder the running gateway's workers write to."""
    config = load_config(config_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        counts = config.var_path / "run" / f"prometheus-gateway-{port}" / "counter_1.db"
        counts.parent.mkdir(parents=True)
        counts.write_bytes(b"the running gateway's")
        with pytest.raises(SystemExit, match=f"127.0.0.1:{port}"):
            serve(config, "127.0.0.1", port, GatewaySettings(config=config_path, workers=2))
    assert counts.read_bytes() == b"the running gateway's"
