"""What bench_concurrency measures: a Redis as `make up` runs it and one gateway of two worker
processes over the paced backend (bench/paced_gateway.py), with a key per team.

    running_rig(settings, folder) ─▶ Rig: ports, keys, the workers' pids, an admin Redis client

Everything listens on 127.0.0.1, on free ports; the folder holds the configuration, Redis's
data, the logs and the loop-lag files, and goes with the run.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
import yaml

from bench.process_stats import children, samples, served_connections
from build_engines.corpus import generate_corpus
from build_engines.tokenizer import train_tokenizer
from config.redis_client import sync_redis_client
from config.settings import GatewaySpec, SwitchyardConfig, load_config
from quota.keys import SyncKeyStore
from server_host.ports import free_ports
from server_host.process import ManagedProcess, wait_until
from stack.redis_server import RedisServer

MODEL = "small"
REPO_ROOT = Path(__file__).resolve().parent.parent
# Per-key caps far above any step: the bench measures the gateway's stream slots, not these.
KEY_CAP = 1_000_000
_REQUEST_ID = re.compile(r"[0-9a-f]{16,}")


@dataclass(frozen=True, slots=True)
class RigSettings:
    """The gateway's worker processes, its stream slots per worker (None: the configuration's
    default) and the teams' weights."""

    workers: int
    max_streams_per_worker: int | None
    stream_reserve_fraction: float | None
    weights: dict[str, float]
    pace: str | None = None  # the paced backend's "first_s,gap_low_s,gap_high_s" (None: its default)


@dataclass(frozen=True, slots=True)
class Rig:
    config: SwitchyardConfig
    http_port: int
    grpc_port: int
    redis_port: int
    keys: dict[str, str]  # team → API key
    supervisor_pid: int
    lag_dir: Path
    log_path: Path
    admin: redis.Redis
    applied: dict[str, Any]  # the gateway settings written (the slot keys only if the config has them)

    def worker_pids(self) -> list[int]:
        """The workers serving now. uvicorn's supervisor replaces a worker that dies, or that
        does not answer its health check within 5 s (it is then killed): each worker names its
        loop-lag file by its pid, so the live ones are those files' pids among its children."""
        started = {int(path.stem.removeprefix("lag-")) for path in self.lag_dir.glob("lag-*.txt")}
        return sorted(started & {self.supervisor_pid, *children(self.supervisor_pid)})


def _config_text(
    settings: RigSettings, root: Path, ports: tuple[int, int, int], secrets: Path
) -> tuple[str, dict[str, Any]]:
    http_port, grpc_port, redis_port = ports
    gateway: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": http_port,
        "grpc_port": grpc_port,
        "max_requests_per_key": KEY_CAP,
        "max_streams_per_key": KEY_CAP,
    }
    # The stream-slot settings are new: write them only where the configuration knows them.
    for name in ("max_streams_per_worker", "stream_reserve_fraction"):
        value = getattr(settings, name)
        if value is not None and name in GatewaySpec.model_fields:
            gateway[name] = value
    raw = {
        "var_dir": str(root / "var"),
        "secrets_dir": str(secrets),
        "models": {MODEL: {"weights_uri": str(root / "model"), "max_context_tokens": 36_864}},
        "pools": {MODEL: {"model_id": MODEL, "ports": {"http": 9101, "grpc": 9102, "metrics": 9103}}},
        "redis": {"host": "127.0.0.1", "port": redis_port},
        "teams": {team: {"weight": weight} for team, weight in settings.weights.items()},
        "gateway": gateway,
    }
    return yaml.safe_dump(raw, sort_keys=False), gateway


def _tokenizer(folder: Path) -> None:
    """The `small` model's tokenizer if it is built, else one trained the same way."""
    folder.mkdir(parents=True, exist_ok=True)
    built = load_config().model_dir(MODEL) / "tokenizer.json"
    if built.is_file():
        shutil.copyfile(built, folder / "tokenizer.json")
    else:
        train_tokenizer(generate_corpus(40, 2048), 2048).save(str(folder / "tokenizer.json"))


def _ready(port: int) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    return False


@contextlib.contextmanager
def running_rig(settings: RigSettings, root: Path, start_timeout_s: float = 120.0) -> Iterator[Rig]:
    """Start Redis and the gateway under `root`, yield the rig, stop both."""
    http_port, grpc_port, redis_port = free_ports(3)
    redis_server = RedisServer(redis_port, root / "redis", root / "redis.log", secrets_dir=root / "secrets")
    redis_server.start()
    gateway: ManagedProcess | None = None
    try:
        _tokenizer(root / "model")
        text, applied = _config_text(settings, root, (http_port, grpc_port, redis_port), redis_server.secrets_dir)
        config_path = root / "switchyard.yaml"
        config_path.write_text(text)
        config = load_config(config_path)
        admin = sync_redis_client(config, "admin", max_connections=4)
        store = SyncKeyStore(admin, config.teams)
        keys = {team: store.create(team) for team in config.teams}
        lag_dir = root / "lag"
        lag_dir.mkdir()
        argv = [sys.executable, "-m", "bench.paced_gateway", str(config_path), "--port", str(http_port)]
        argv += ["--grpc-port", str(grpc_port), "--workers", str(settings.workers), "--lag-dir", str(lag_dir)]
        if settings.pace is not None:
            argv += ["--pace", settings.pace]
        gateway = ManagedProcess("gateway", argv, root / "gateway.log", cwd=REPO_ROOT)
        gateway.start()
        assert gateway.pid is not None
        pid = gateway.pid
        rig = Rig(config, http_port, grpc_port, redis_port, keys, pid, lag_dir, gateway.log_path, admin, applied)

        def up() -> bool:
            return len(rig.worker_pids()) == settings.workers and _ready(http_port)

        if not wait_until(lambda: up() or not gateway.alive(), start_timeout_s) or not gateway.alive():
            raise RuntimeError(f"the bench's gateway did not start:\n{gateway.log_tail()}")
        yield rig
        admin.close()
    finally:
        if gateway is not None:
            gateway.stop(timeout_s=30)
        redis_server.stop()


def log_warnings(log_path: Path) -> dict[str, int]:
    """The gateway log's warnings and errors (and uvicorn's lines about workers that died), by
    level, logger and the message's start: what went wrong, without the access lines."""
    counts: Counter[str] = Counter()
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = str(entry.get("message", ""))
        if entry.get("level") in ("WARNING", "ERROR", "CRITICAL") or "died" in message:
            message = _REQUEST_ID.sub("<id>", message)[:100]
            counts[f"{entry.get('level')} {entry.get('logger')}: {message}"] += 1
    return dict(counts.most_common(20))


@dataclass(frozen=True, slots=True)
class Settled:
    """How long after a step the gateway took to close every connection, then to go quiet
    (each worker under `QUIET_CPU` of a core: its cancelled requests' Redis writes done);
    None where it did not within the timeout."""

    close_s: float | None
    quiet_s: float | None


QUIET_CPU = 0.2
QUIET_WINDOW_S = 2.0


def settle(rig: Rig, timeout_s: float = 180.0) -> Settled:
    """Wait for the gateway to close the last step's connections and go quiet, so the next
    step starts on a gateway at rest."""
    began = time.monotonic()
    closed = wait_until(lambda: served_connections((rig.http_port, rig.grpc_port)) == 0, timeout_s, interval_s=0.25)
    close_s = round(time.monotonic() - began, 1) if closed else None
    while time.monotonic() - began < timeout_s:
        before = samples(rig.worker_pids())
        time.sleep(QUIET_WINDOW_S)
        after = samples(list(before))
        if all(after[pid].cpu_s - before[pid].cpu_s < QUIET_CPU * QUIET_WINDOW_S for pid in after):
            return Settled(close_s, round(time.monotonic() - began, 1))
    return Settled(close_s, None)
