"""`switchyard up` as a person runs it: everything starts (two servers of the pool, registered),
the printed curl works, `switchyard servers` lists the servers and `switchyard drain` takes one
away, Ctrl-C stops every process it started (no orphaned tritonserver, stub, gateway,
dispatcher or redis-server)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from config.settings import Ports, TeamSpec, dump_config
from server_host.ports import free_ports
from server_host.process import wait_until

pytestmark = pytest.mark.integration


def _descendants(pid: int) -> set[int]:
    """Every process below `pid`, read from /proc (children of children included)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def test_up_serves_and_ctrl_c_leaves_nothing_behind(triton_pool, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base = triton_pool.config
    http, grpc, metrics, gateway_port, redis_port, bulk_metrics = free_ports(6)
    pool = base.pools[triton_pool.pool_id].model_copy(
        update={"ports": Ports(http=http, grpc=grpc, metrics=metrics), "target_copies": 2}
    )
    config = base.model_copy(
        update={
            "pools": {"up-tiny": pool},
            "gateway": base.gateway.model_copy(update={"port": gateway_port}),
            "redis": base.redis.model_copy(update={"port": redis_port}),
            "teams": {"dev": TeamSpec()},
            "bulk": base.bulk.model_copy(update={"metrics_port": bulk_metrics}),
        }
    )
    config_path = dump_config(config, tmp_path / "switchyard.yaml")
    up = subprocess.Popen(
        [sys.executable, "-m", "switchyard.cli", "--config", str(config_path), "up"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert up.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl-C stops everything" in line:
                break
        output = "".join(lines)
        assert "Switchyard is up" in output, output
        assert "curl -N" in output
        children = _descendants(up.pid)
        assert len(children) >= 4  # redis-server, tritonserver (+ stubs), gateway, dispatcher
        assert any(_cmdline(pid).endswith("-m bulk") for pid in children), "no bulk dispatcher running"

        url = f"http://127.0.0.1:{config.gateway.port}"
        assert "Authorization: Bearer $(cat" in output  # the printed curl carries the team's key
        dev_key = (config.var_path / "keys" / "dev-api-key").read_text().strip()
        reply = httpx.post(
            f"{url}/v1/generate",
            json={"model": triton_pool.model_id, "prompt": "Hello there", "max_tokens": 8, "ignore_eos": True},
            headers={"Authorization": f"Bearer {dev_key}"},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 8

        listed = _switchyard(config_path, "servers")
        assert [row.split()[:3] for row in listed.splitlines()[2:]] == [
            ["up-tiny-0", "up-tiny", "ready"],
            ["up-tiny-1", "up-tiny", "ready"],
        ], listed
        assert f"{http + 10}" in listed  # copy 1: the pool's ports + 10
        assert "drain" in _switchyard(config_path, "drain", "up-tiny-1")
        assert wait_until(lambda: "up-tiny-1" not in _switchyard(config_path, "servers"), 30), "not drained"
        assert "up-tiny-0" in _switchyard(config_path, "servers")

        up.send_signal(signal.SIGINT)  # what Ctrl-C delivers
        assert up.wait(timeout=60) == 0
        assert wait_until(lambda: not any(_pid_alive(pid) for pid in children), 10), "orphans left running"
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


def _switchyard(config_path: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "switchyard.cli", "--config", str(config_path), *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead but not reaped yet: not an orphan that runs on.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
