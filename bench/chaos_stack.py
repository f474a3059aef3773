"""The chaos run's stack: `fleet.stack.Stack` with the supervisor in a process of its own
(`python -m bench.chaos_supervisor`), so it can be SIGKILLed like any other part, and the bench
as the process manager of the parts it kills (a Kubernetes-like restart after each kill):

    tritonserver, engine stub   the supervisor relaunches the server (fleet/supervisor.py)
    gateway worker              uvicorn's parent starts a new worker
    dispatcher, supervisor      `restart_dispatcher` / `restart_supervisor` (here)
    redis-server                `restart_redis`: the same port, its append-only file reloaded

Finding processes: a server's `switchyard triton` wrapper pid is in its registry record; the
`tritonserver` is that wrapper's child, the engine model's Python stub one of its children.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import redis

from fleet.launch.process import ManagedProcess
from fleet.stack import Stack
from router.registry import server_key

SUPERVISOR_MODULE = "bench.chaos_supervisor"


class ChaosStack(Stack):
    """A `Stack` whose supervisor is a process the bench can kill and start again."""

    supervisor_process: ManagedProcess | None = None

    def _start_servers(self, timeout_s: float) -> None:
        self.start_supervisor()
        deadline = time.monotonic() + timeout_s
        while not self.all_ready():
            process = self.supervisor_process
            if process is None or not process.alive():
                raise RuntimeError(f"the supervisor exited:\n{process.log_tail() if process else ''}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"servers not ready after {timeout_s:.0f} s")
            time.sleep(0.5)

    def server_ids(self) -> list[str]:
        return [f"{pool}-{k}" for pool in self.pool_ids for k in range(self.config.pools[pool].target_copies)]

    def server_record(self, server_id: str) -> dict[str, str]:
        client = redis.Redis.from_url(self.config.redis_url("admin"), decode_responses=True)
        try:
            return client.hgetall(server_key(server_id))  # type: ignore[return-value]
        finally:
            client.close()

    def all_ready(self) -> bool:
        try:
            return all(self.server_record(sid).get("state") == "ready" for sid in self.server_ids())
        except redis.RedisError:
            return False

    def admin_client(self) -> httpx.AsyncClient:
        """The gateway with the admin key (`Stack.ensure_keys` wrote it)."""
        assert self.admin_key_path is not None
        key = self.admin_key_path.read_text().strip()
        return httpx.AsyncClient(base_url=self.gateway_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)

    def start_supervisor(self) -> None:
        log = self.config.var_path / "logs" / "supervisor.log"
        argv = [sys.executable, "-m", SUPERVISOR_MODULE]
        self.supervisor_process = ManagedProcess("supervisor", argv, log, env=self._environment())
        self.supervisor_process.start()

    def restart_supervisor(self) -> None:
        """After a SIGKILL: reap it (the servers, in sessions of their own, live on) and start a
        new one, which takes over the servers it finds alive."""
        if self.supervisor_process is not None:
            self.supervisor_process.stop(timeout_s=0.0)
        self.start_supervisor()

    def restart_dispatcher(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop(timeout_s=0.0)
        self.start_dispatcher()

    def restart_redis(self) -> None:
        """Stop redis-server (SIGTERM: it syncs its append-only file) and start it again."""
        assert self.redis is not None
        self.redis.stop()
        self.redis.start()

    def stop(self) -> None:
        redis_server, self.redis = self.redis, None
        super().stop()  # the dispatcher, then the gateway
        if self.supervisor_process is not None:  # its servers stop with it (SIGTERM: at once)
            self.supervisor_process.stop(timeout_s=60.0)
            self.supervisor_process = None
        self.redis = redis_server
        if redis_server is not None:
            redis_server.stop()


def children(pid: int, proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """(pid, command line) of each live child of `pid`."""
    found = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            fields = text[text.rindex(")") + 2 :].split()
            if int(fields[1]) != pid or fields[0] == "Z":
                continue
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        found.append((int(stat.parent.name), cmdline))
    return found


def tritonserver_of(wrapper_pid: int) -> int | None:
    return next((pid for pid, cmd in children(wrapper_pid) if "tritonserver" in cmd.split(" ", 1)[0]), None)


def engine_stub_of(tritonserver_pid: int) -> int | None:
    """The Python backend stub that runs the engine model (`cpu_engine`) of a tritonserver."""
    return next(
        (pid for pid, cmd in children(tritonserver_pid) if "triton_python_backend_stub" in cmd and "cpu_engine" in cmd),
        None,
    )
