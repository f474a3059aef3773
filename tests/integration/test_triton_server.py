"""The launcher against the real binary: failures are loud, shutdown leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from build_engines.repository import fill_repository
from config.settings import SwitchyardConfig
from server_host.ports import free_ports
from server_host.triton_server import TritonServer, TritonStartError

pytestmark = pytest.mark.integration


def _config(tmp_path: Path) -> SwitchyardConfig:
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from conftest import tiny_pool_config  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    config: SwitchyardConfig = tiny_pool_config(tmp_path)
    return config


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # Zombies (exited, not yet reaped by init) still count for killpg: look for live ones.
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def test_a_model_that_fails_to_load_fails_start_with_the_log(tmp_path: Path) -> None:
    config = _config(tmp_path)  # the model was never built: cpu_engine cannot load
    repository = fill_repository(config, "tiny")
    ports = config.pools["tiny"].ports
    network = config.network
    server = TritonServer(
        repository, ports, var_dir=config.var_path, name="broken", inference_key=None,
        host=network.servers.bind_host, keepalive=network.triton_grpc,
    )  # fmt: skip
    with pytest.raises(TritonStartError) as failure:
        server.start()
    assert "exited with code" in str(failure.value)
    assert "model_dir" in str(failure.value)  # the cause, from the log tail


def test_run_triton_serves_until_sigterm_and_leaves_no_process(triton_pool, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A second server for the already built model, on fresh ports, through run_triton.
    http, grpc, metrics = free_ports(3)
    script = (
        "import sys\n"
        "from config.settings import Ports\n"
        "from server_host.server_process import run_triton\n"
        f"config = __import__('pickle').loads({__import__('pickle').dumps(triton_pool.config)!r})\n"
        f"sys.exit(run_triton(config, {triton_pool.pool_id!r}, Ports(http={http}, grpc={grpc}, metrics={metrics})))\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "ready" in line and f":{grpc}" in line
        server_pid = int(subprocess.check_output(["pgrep", "-P", str(process.pid), "tritonserver"]).split()[0])
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
    deadline = time.monotonic() + 5
    while _group_alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_alive(server_pid), "tritonserver or a stub outlived run_triton"
