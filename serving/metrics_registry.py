"""Where `/metrics` reads from: this process's registry, or every worker's files.

One gateway process keeps its metrics in a `CollectorRegistry` of its own (`GatewayMetrics`).
Under uvicorn with several workers, each scrape lands on whichever worker accepts it, so a
registry per process makes counters jump between workers' values (scrapers see resets).
`serve()` therefore runs its workers in prometheus-client's multiprocess mode:

    serve() (the parent)      fresh_multiprocess_dir(var/run/prometheus-gateway-<port>/), and
      │                       PROMETHEUS_MULTIPROC_DIR set before uvicorn spawns the workers
      ├─ worker 101 ─ writes ─▶ counter_101.db  histogram_101.db  gauge_livesum_101.db
      └─ worker 102 ─ writes ─▶ counter_102.db  histogram_102.db  gauge_livesum_102.db
    GET /metrics, any worker: worker_metrics() merges every file

Counters and histograms sum over every worker that ever ran this start, exited ones included,
so a restarted worker never takes a count backwards. Gauges are `livesum`: summed over the
workers alive now; a dead worker's gauge files are dropped at the next scrape (uvicorn has no
hook when a worker exits, and the supervisor restarts it under a new pid).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import generate_latest, values
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

# Read by prometheus_client when it is first imported, in each process.
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# gauge_<mode>_<pid>.db for the `live*` modes: the files mark_process_dead removes.
_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db")


def fresh_multiprocess_dir(path: Path) -> Path:
    """`path`, emptied (or made): a gateway start must not inherit the last run's counts, nor
    read the files of workers that are gone. Call before any worker starts."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def check_multiprocess_values(path: Path) -> None:
    """Raise unless this process writes its metrics to files (`MULTIPROC_DIR_ENV` was set when
    prometheus_client was imported) in the existing folder `path`."""
    if values.ValueClass is values.MutexValue:
        raise RuntimeError(
            f"metrics folder {path} given, but {MULTIPROC_DIR_ENV} was not set when prometheus_client "
            "was imported: this process's metrics would never reach it"
        )
    written_to = os.environ.get(MULTIPROC_DIR_ENV, "")
    if not written_to or Path(written_to).resolve() != path.resolve():
        raise RuntimeError(
            f"metrics folder {path} given, but this process writes to {MULTIPROC_DIR_ENV}={written_to!r}"
        )
    if not path.is_dir():
        raise RuntimeError(f"{MULTIPROC_DIR_ENV}={path} is not a folder")


def forget_dead_workers(path: Path) -> list[int]:
    """Drop the live-gauge files of processes that no longer run; returns their pids.

    The supervisor starts a new worker (new pid) when one dies; a request it had in flight
    must not stay in `requests_in_flight` forever. Its counters and histograms stay."""
    dead = sorted(
        {
            int(match.group(1))
            for name in os.listdir(path)
            if (match := _LIVE_GAUGE_FILE.fullmatch(name)) and not _running(int(match.group(1)))
        }
    )
    for pid in dead:
        mark_process_dead(pid, str(path))  # type: ignore[no-untyped-call]
    return dead


def _running(pid: int) -> bool:
    # Signal 0 checks without sending. A pid reused by an unrelated process reads as running:
    # that worker's gauges stay until it, too, exits (rare; the counts are never affected).
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def worker_metrics(path: Path) -> Collector:
    """Every worker's metrics, merged from the files under `path` (dead workers' gauges
    dropped first)."""
    forget_dead_workers(path)
    return MultiProcessCollector(None, str(path))  # type: ignore[no-untyped-call]


@dataclass(frozen=True, slots=True)
class _Merged:
    collectors: tuple[Collector, ...]
    metrics: tuple[Metric, ...]

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            yield from collector.collect()
        yield from self.metrics


def exposition(collectors: Iterable[Collector], metrics: Iterable[Metric] = ()) -> bytes:
    """The text format of what `collectors` hold, then of `metrics` (made for this scrape
    alone); metric names must not repeat."""
    return generate_latest(_Merged(tuple(collectors), tuple(metrics)))
