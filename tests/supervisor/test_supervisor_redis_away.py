"""A supervisor whose Redis refuses writes still acts on its own host: a server it finds dead
is killed and its relaunch scheduled before the registry is told, so a refused write never
leaves a copy forgotten — unkilled, never relaunched, heartbeated by no one (the chaos run's
Redis restart then failover: four copies stranded for the rest of the run).

The registry and board are fakes (Redis refusing, a board with no report); the server is a real
child process, and the supervisor's look at it is real (nothing listens on its ports)."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest
import redis

from config.settings import SwitchyardConfig
from contracts.engine_metrics import EngineHealth
from fleet_state.load_board import LoadBoard, LoadReport
from fleet_state.registry import ServerInfo, ServerRegistry
from fleet_state.server_health import Probe, Verdict
from fleet_state.server_state import ServerState
from server_host.ports import ConfiguredPorts
from server_host.process import ManagedProcess
from supervisor.server_copy import ServerCopy
from supervisor.supervisor import Supervisor


def free_port_base() -> int:
    """Three closed ports in a row, for the pool's http, grpc and metrics."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            base = int(sock.getsockname()[1])
        if base + 2 < 65536:
            return base
    raise RuntimeError("no port found")


def config(tmp_path: Path, base: int) -> SwitchyardConfig:
    return SwitchyardConfig.model_validate(
        {
            "var_dir": str(tmp_path),
            "models": {"m": {"weights_uri": "m", "max_context_tokens": 4096}},
            "pools": {"a": {"model_id": "m", "ports": {"http": base, "grpc": base + 1, "metrics": base + 2}}},
        }
    )


class RefusingRegistry:
    """Redis answering reads with nothing and refusing every write, as while it loads its data."""

    async def servers(self, pool_id: str | None = None, *, now: float | None = None) -> list[ServerInfo]:
        return []

    async def set_state(self, server_id: str, state: ServerState, now: float, *, epoch: int | None = None) -> bool:
        raise redis.ConnectionError("LOADING Redis is loading the dataset in memory")

    async def heartbeat(self, *args: object, **kwargs: object) -> bool:
        raise redis.ConnectionError("LOADING Redis is loading the dataset in memory")


class EmptyBoard:
    async def read(self, pool_ids: list[str]) -> dict[str, dict[str, LoadReport]]:
        return {pool_id: {} for pool_id in pool_ids}


async def test_a_dead_server_is_killed_and_its_relaunch_scheduled_though_redis_refuses(tmp_path: Path) -> None:
    cfg = config(tmp_path, free_port_base())
    registry: ServerRegistry = RefusingRegistry()  # type: ignore[assignment]
    board: LoadBoard = EmptyBoard()  # type: ignore[assignment]
    supervisor = Supervisor(cfg, registry, ConfiguredPorts(cfg), board, clock=lambda: 1000.0)
    process = ManagedProcess("server a-0", ["sleep", "60"], tmp_path / "server.log")
    process.start()
    pid = process.pid
    assert pid is not None
    try:
        copy = ServerCopy("a", 0, ConfiguredPorts(cfg).ports("a", 0), cfg.fleet.dead_after_s)
        copy.process, copy.state = process, ServerState.READY
        for now, beat in ((990.0, 1.0), (990.5, 2.0)):  # it was alive, its engine beating
            engine = EngineHealth(heartbeat=beat, capacity_tokens=1, free_tokens=1, active=0, waiting=0)
            assert copy.liveness.observe(now, Probe(True, False, engine)) in (Verdict.STARTING, Verdict.ALIVE)
        supervisor._copies[copy.server_id] = copy  # as start() would have it

        # Now nothing listens on its ports: dead ("connection refused"), though the process runs.
        with pytest.raises(redis.ConnectionError):
            await supervisor.tick()
        with pytest.raises(ProcessLookupError):  # killed, and reaped
            os.kill(pid, 0)
        assert copy.state is ServerState.DEAD and copy.pid is None and copy.relaunch_at == 1000.0
        assert supervisor.copies() == [copy]  # still supervised: its relaunch comes with the next passes
    finally:
        process.stop(0.0, signal.SIGKILL)
        await supervisor.stop()
