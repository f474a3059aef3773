"""How the gateway's metrics add up over worker processes (serving/metrics_registry.py): real
child processes write `GatewayMetrics` to one multiprocess folder; this process reads it as
a scrape would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from serving.metrics import GatewayMetrics
from serving.metrics_registry import MULTIPROC_DIR_ENV, exposition, fresh_multiprocess_dir, worker_metrics

LABELS = {"model": "small", "request_class": "interactive"}
StartWorker = Callable[[int, int, int], "subprocess.Popen[str]"]

# One worker: records what argv says, says so, and lives until its stdin closes.
WORKER = """
import sys
from pathlib import Path
from serving.metrics import GatewayMetrics

folder, requests, in_flight, queued = sys.argv[1], *map(int, sys.argv[2:])
metrics = GatewayMetrics(multiprocess_dir=Path(folder))
metrics.requests.labels("small", "interactive", "stop").inc(requests)
metrics.in_flight.labels("small", "interactive").inc(in_flight)
metrics.observe_queues({"small": {"alpha": queued}})
metrics.latency.labels("small", "interactive").observe(0.2)
print("recorded", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return fresh_multiprocess_dir(tmp_path / "prometheus")


@pytest.fixture
def start_worker(folder: Path) -> Iterator[StartWorker]:
    started: list[subprocess.Popen[str]] = []

    def start(requests: int, in_flight: int, queued: int) -> subprocess.Popen[str]:
        env = {**os.environ, MULTIPROC_DIR_ENV: str(folder)}
        argv = [sys.executable, "-c", WORKER, str(folder), str(requests), str(in_flight), str(queued)]
        worker = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started.append(worker)
        assert worker.stdout is not None and worker.stdout.readline() == "recorded\n"
        return worker

    yield start
    for worker in started:
        worker.kill()
        worker.wait()


def scrape(folder: Path) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = exposition([worker_metrics(folder)]).decode()
    return {
        (found.name, frozenset(found.labels.items())): found.value
        for family in text_string_to_metric_families(text)
        for found in family.samples
    }


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_counters_sum_over_workers_and_gauges_over_live_ones(folder: Path, start_worker: StartWorker) -> None:
    first = start_worker(2, 1, 1)  # requests, in flight, queued
    second = start_worker(3, 2, 4)
    both = scrape(folder)
    assert value(both, "switchyard_gateway_requests_total", **LABELS, outcome="stop") == 5
    assert value(both, "switchyard_gateway_request_latency_seconds_count", **LABELS) == 2
    assert value(both, "switchyard_gateway_requests_in_flight", **LABELS) == 3  # livesum, no pid label
    assert value(both, "switchyard_gateway_queued_requests", pool="small", team="alpha") == 5

    assert second.stdin is not None
    second.stdin.close()  # it exits; uvicorn would start another worker under a new pid
    assert second.wait(timeout=30) == 0
    after = scrape(folder)
    assert value(after, "switchyard_gateway_requests_total", **LABELS, outcome="stop") == 5  # kept
    assert value(after, "switchyard_gateway_request_latency_seconds_count", **LABELS) == 2
    assert value(after, "switchyard_gateway_requests_in_flight", **LABELS) == 1  # the live worker's
    assert value(after, "switchyard_gateway_queued_requests", pool="small", team="alpha") == 1
    assert sorted(path.name for path in folder.glob(f"*_{second.pid}.db")) == [
        f"counter_{second.pid}.db",
        f"histogram_{second.pid}.db",
    ]
    assert first.poll() is None


def test_a_queue_that_empties_reads_zero() -> None:
    metrics = GatewayMetrics()
    metrics.observe_queues({"small": {"alpha": 2, "beta": 1}})
    metrics.observe_queues({"small": {"beta": 3}})
    assert (
        metrics.registry.get_sample_value("switchyard_gateway_queued_requests", {"pool": "small", "team": "alpha"}) == 0
    )
    assert (
        metrics.registry.get_sample_value("switchyard_gateway_queued_requests", {"pool": "small", "team": "beta"}) == 3
    )


def test_a_folder_without_multiprocess_values_is_refused(folder: Path) -> None:
    # This process imported prometheus_client without PROMETHEUS_MULTIPROC_DIR: its values
    # live in memory and would never reach the folder.
    with pytest.raises(RuntimeError, match=MULTIPROC_DIR_ENV):
        GatewayMetrics(multiprocess_dir=folder)


def test_a_fresh_folder_is_empty(folder: Path) -> None:
    (folder / "counter_1.db").write_bytes(b"last run")
    assert list(fresh_multiprocess_dir(folder).iterdir()) == []
