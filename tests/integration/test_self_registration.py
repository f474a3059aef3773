"""`switchyard triton --register-host`: a server with no supervisor (a Kubernetes pod) registers
and heartbeats itself, drains on SIGTERM, and leaves the registry when it stops."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from config.settings import dump_config
from fleet_state.registry import server_key
from server_host.ports import free_ports
from server_host.process import wait_until

from .conftest import TritonPool

pytestmark = pytest.mark.integration


def test_a_pod_registers_itself_beats_drains_and_leaves(
    triton_pool: TritonPool, redis_url: str, redis_secrets: Path, tmp_path: Path
) -> None:
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    redis_spec = triton_pool.config.redis.model_copy(update={"port": port})
    config = triton_pool.config.model_copy(update={"redis": redis_spec, "secrets_dir": str(redis_secrets)})
    path = dump_config(config, tmp_path / "switchyard.yaml")
    http, grpc, metrics = free_ports(3)
    argv = [sys.executable, "-m", "switchyard.cli", "--config", str(path), "triton", "--pool", triton_pool.pool_id,
            "--server-id", "pod-a", "--ports", f"{http},{grpc},{metrics}", "--register-host", "127.0.0.1",
            "--no-fill"]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert wait_until(lambda: client.hget(server_key("pod-a"), "state") == "ready", 60), "never registered"
        record = client.hgetall(server_key("pod-a"))
        assert (record["grpc_port"], record["host"], record["pool_id"]) == (str(grpc), "127.0.0.1", "tiny")
        first = float(record["heartbeat_at"])
        assert wait_until(lambda: float(client.hget(server_key("pod-a"), "heartbeat_at") or 0) > first + 0.5, 5)
        process.send_signal(signal.SIGTERM)  # what Kubernetes sends (after the preStop drain)
        assert wait_until(lambda: client.hget(server_key("pod-a"), "state") in ("draining", None), 5)
        assert process.wait(30) == 0
        assert not client.exists(server_key("pod-a")) and not client.sismember("sy:servers", "pod-a")
    finally:
        if process.poll() is None:
            process.kill()
        client.close()
