"""The chaos run's stack: `stack.local_stack.Stack` with the supervisor in a process of its own
(`python -m faults.chaos_supervisor`), so it can be SIGKILLed like any other part, and the run
as the process manager of the parts it kills (a Kubernetes-like restart after each kill):

    tritonserver, engine stub   the supervisor relaunches the server (supervisor/supervisor.py)
    gateway worker              uvicorn's parent starts a new worker
    dispatcher, supervisor      `restart_dispatcher` / `restart_supervisor` (here)
    redis-server                `restart_redis`: the primary on its port, its append-only file reloaded
    the Redis primary, killed   `fail_over_redis` (sentinel mode, the default): SIGKILL the primary,
                                wait for the sentinels to promote the replica, start the old one
                                again (the sentinels make it a replica of the new primary)

Finding processes: a server's `switchyard triton` wrapper pid is in its registry record; the
`tritonserver` is that wrapper's child, the engine model's Python stub one of its children.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import httpx
import redis

from config.redis_client import sync_redis_client
from config.redis_settings import RedisSpec
from config.settings import SwitchyardConfig
from fleet_state.registry import server_key
from server_host.ports import free_ports
from server_host.process import ManagedProcess, wait_until
from stack.local_stack import Stack
from stack.redis_sentinel import RedisReplicaSet
from stack.redis_server import RedisServer

SUPERVISOR_MODULE = "faults.chaos_supervisor"
# The harness is not installed (pyproject.toml): `python -m faults...` runs from the checkout.
CHECKOUT = Path(__file__).resolve().parents[1]
# The sentinels call a primary down after this long without an answer: Redis's example 5 s.
# At 1 s a promoted replica, busy on this loaded two-core machine, was called down in turn
# and failed over again within two seconds.
DOWN_AFTER_MS = 5000
FAILOVER_TIMEOUT_MS = 10000
PROMOTION_TIMEOUT_S = 60.0


def with_replica_set(config: SwitchyardConfig) -> tuple[SwitchyardConfig, RedisReplicaSet]:
    """`config` in sentinel mode over a new primary, two replicas and three sentinels on free
    ports (not started), data under its var folder. Two replicas: a primary refuses writes
    without one (`min-replicas-to-write 1`), so the promoted one must still have a replica
    while the killed node restarts (docs/redis.md)."""
    root = config.var_path / "redis-set"
    shutil.rmtree(root, ignore_errors=True)  # an earlier run's sentinels remember its ports
    ports = free_ports(6)
    replicas = RedisReplicaSet(
        ports[:3], ports[3:], root, secrets_dir=config.secrets_path,
        down_after_ms=DOWN_AFTER_MS, failover_timeout_ms=FAILOVER_TIMEOUT_MS, host=config.redis.host,
    )  # fmt: skip
    spec = RedisSpec.model_validate({**config.redis.model_dump(), **replicas.redis_settings()})
    return config.model_copy(update={"redis": spec}), replicas


class ChaosStack(Stack):
    """A `Stack` whose supervisor is a process the run can kill and start again; with
    `replicas`, its Redis is that primary, replica and sentinels instead of one redis-server."""

    supervisor_process: ManagedProcess | None = None

    def __init__(self, config: SwitchyardConfig, replicas: RedisReplicaSet | None = None) -> None:
        super().__init__(config, with_redis=replicas is None)
        self.replicas = replicas

    def start(self, timeout_s: float = 180.0) -> None:
        if self.replicas is not None:
            self.replicas.start()
            try:
                self.ensure_keys()
            except BaseException:
                self.replicas.stop()
                raise
        super().start(timeout_s)

    def redis_admin(self, **options: object) -> redis.Redis:
        """An admin client that follows the primary (sentinel mode) or the one Redis."""
        return sync_redis_client(self.config, "admin", **options)

    def primary_node(self) -> RedisServer:
        """The replica set's node that the sentinels call the primary now."""
        assert self.replicas is not None
        address = self.replicas.primary()
        node = next((n for n in self.replicas.nodes if (n.host, n.port) == address), None)
        if node is None:
            raise RuntimeError(f"no primary the sentinels agree on (they say {address})")
        return node

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
        client = self.redis_admin(decode_responses=True, socket_timeout=2.0)
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
        self.supervisor_process = ManagedProcess("supervisor", argv, log, env=self._environment(), cwd=CHECKOUT)
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

    def restart_redis(self) -> str:
        """Stop redis-server (SIGTERM: it syncs its append-only file and its replica) and start
        it again: the primary, in sentinel mode, which rejoins as the primary when the restart
        beat the sentinels' `down_after`, else as a replica. Returns what happened."""
        if self.replicas is None:
            assert self.redis is not None
            self.redis.stop()
            self.redis.start()
            return f"redis-server :{self.redis.port}"
        node = self.primary_node()
        node.stop()
        again = self.replicas.rejoin(node)
        return f"primary :{node.port} restarted, back as {again.role()}"

    def fail_over_redis(self) -> str:
        """SIGKILL the primary (nothing flushed), wait for the sentinels to agree on the
        promoted replica, then start the old primary again as its replica. Returns what
        happened, for the history."""
        assert self.replicas is not None
        replicas, old = self.replicas, self.primary_node()
        old.kill()
        promoted = wait_until(lambda: replicas.primary() not in (None, (old.host, old.port)), PROMOTION_TIMEOUT_S)
        if not promoted:
            raise RuntimeError(f"no replica promoted within {PROMOTION_TIMEOUT_S:.0f} s of killing :{old.port}")
        again = replicas.rejoin(old, PROMOTION_TIMEOUT_S)
        return f"primary :{old.port} killed, :{self.primary_node().port} promoted, :{old.port} back as {again.role()}"

    def stop(self) -> None:
        redis_server, self.redis = self.redis, None
        super().stop()  # the dispatcher, then the gateway
        if self.supervisor_process is not None:  # its servers stop with it (SIGTERM: at once)
            self.supervisor_process.stop(timeout_s=60.0)
            self.supervisor_process = None
        self.redis = redis_server
        if redis_server is not None:
            redis_server.stop()
        if self.replicas is not None:
            self.replicas.stop()


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
    """The Python backend stub that runs a tritonserver's engine: the `cpu_engine` model's, or
    `llm`'s own when the engine runs inside it (the pools' default)."""
    stubs = [(pid, cmd) for pid, cmd in children(tritonserver_pid) if "triton_python_backend_stub" in cmd]
    for model in ("cpu_engine/", "llm/"):
        found = next((pid for pid, cmd in stubs if model in cmd), None)
        if found is not None:
            return found
    return None
