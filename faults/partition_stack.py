"""The partition run's stack: every part on a host of its own (faults.netns_hosts), each binding
and advertising its host's address.

    host       runs                                              binds / registers
    gw1, gw2   a gateway (one worker each); gw1 also the         gateway.host (SWITCHYARD_HOST)
               write probe (faults.partition_probe)
    srv1       copy 0 of each pool, srv2 copy 1: `switchyard     network.servers.bind_host,
               triton --register-host`, each registering and     --register-host: the host's
               heartbeating itself (as a pod per server does)    address
    ctl        the bulk dispatcher (submits through gw1)          nothing
    redis0-2   the replica set's nodes (redis0 starts primary)   the host's address
    sentinels  three sentinels (quorum 2)                        the host's address
    (root)     the run's clients, over the bridge

Servers register themselves rather than run under a supervisor: a supervisor launches local
processes, so one supervisor could not place servers on two hosts, and one per server host
would need pools of its own. The run is their process manager (as Kubernetes is): a server
process that exits (fenced, or crashed) is started again by `revive`.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import httpx
import redis

from build_engines.repository import fill_repository
from config.network_settings import NetworkSpec, ServerAddresses
from config.redis_client import sync_redis_client
from config.redis_settings import RedisSpec
from config.settings import SwitchyardConfig, dump_config
from faults.chaos_stack import CHECKOUT
from faults.netns_hosts import BridgedHost, BridgedNetwork
from fleet_state.registry import server_key
from quota.key_files import ensure_admin_key, ensure_team_keys
from quota.keys import SyncKeyStore
from server_host.ports import ConfiguredPorts, free_ports
from server_host.process import ManagedProcess, http_ok, wait_until
from stack.redis_sentinel import Placement, RedisReplicaSet
from stack.secret_files import ensure_secret_files

GATEWAY_HOSTS = ("gw1", "gw2")
SERVER_HOSTS = ("srv1", "srv2")  # copy k of every pool runs on SERVER_HOSTS[k]
CONTROL_HOST = "ctl"
REDIS_HOSTS = ("redis0", "redis1", "redis2")
SENTINEL_HOST = "sentinels"
ROLES = (*GATEWAY_HOSTS, *SERVER_HOSTS, CONTROL_HOST, *REDIS_HOSTS, SENTINEL_HOST)
DOWN_AFTER_MS = 5000  # as the chaos run (faults.chaos_stack)
FAILOVER_TIMEOUT_MS = 10000


def _placement(host: BridgedHost) -> Placement:
    return Placement(host.address, tuple(host.command([])))


class PartitionStack:
    """Start, watch and stop the parts of one partition run on `net`'s hosts."""

    def __init__(self, config: SwitchyardConfig, net: BridgedNetwork, pool_ids: tuple[str, ...]) -> None:
        self.net = net
        self.pool_ids = pool_ids
        root = config.var_path / "redis-set"
        shutil.rmtree(root, ignore_errors=True)  # an earlier run's sentinels remember its addresses
        ports = free_ports(6)
        self.replicas = RedisReplicaSet(
            ports[:3], ports[3:], root, secrets_dir=config.secrets_path, down_after_ms=DOWN_AFTER_MS,
            failover_timeout_ms=FAILOVER_TIMEOUT_MS, host=net[REDIS_HOSTS[0]].address,
            nodes_at=[_placement(net[r]) for r in REDIS_HOSTS], sentinels_at=[_placement(net[SENTINEL_HOST])] * 3,
        )  # fmt: skip
        spec = RedisSpec.model_validate({**config.redis.model_dump(), **self.replicas.redis_settings()})
        self.config = config.model_copy(update={"redis": spec})
        self.ports = ConfiguredPorts(self.config)
        self.processes: dict[str, ManagedProcess] = {}
        self.restarts: dict[str, int] = {}
        self.team_headers: dict[str, dict[str, str]] = {}
        self.admin_key = ""

    # where things are

    def gateway_url(self, role: str) -> str:
        return f"http://{self.net[role].address}:{self.config.gateway.port}"

    def server_ids(self) -> list[str]:
        return [f"{pool}-{k}" for pool in self.pool_ids for k in range(len(SERVER_HOSTS))]

    def metrics_urls(self) -> dict[str, str]:
        return {
            f"{pool}-{k}": f"http://{self.net[host].address}:{self.ports.ports(pool, k).metrics}/metrics"
            for pool in self.pool_ids
            for k, host in enumerate(SERVER_HOSTS)
        }

    def primary_role(self) -> str | None:
        """The Redis host the sentinels call the primary now."""
        address = self.replicas.primary()
        return next((r for r in REDIS_HOSTS if address is not None and self.net[r].address == address[0]), None)

    def redis_admin(self, **options: object) -> redis.Redis:
        return sync_redis_client(self.config, "admin", **options)

    def all_ready(self) -> bool:
        try:
            client = self.redis_admin(decode_responses=True, socket_timeout=2.0)
            try:
                return all(client.hget(server_key(sid), "state") == "ready" for sid in self.server_ids())
            finally:
                client.close()
        except redis.RedisError:
            return False

    # lifecycle

    def start(self, timeout_s: float = 240.0) -> None:
        config = self.config
        # The probe appends (it may be restarted within a run); an earlier run's acknowledgements
        # are of writes to another Redis. The logs too: an earlier run's lines, with the same
        # seed's ids, would only mislead whoever reads this run's.
        self.probe_path().unlink(missing_ok=True)
        shutil.rmtree(config.var_path / "logs", ignore_errors=True)
        ensure_secret_files(config.secrets_path)
        self.replicas.start()
        self._keys()
        for pool in self.pool_ids:
            fill_repository(config, pool)
        for pool in self.pool_ids:
            for k in range(len(SERVER_HOSTS)):
                self._start(f"{pool}-{k}")
        if not wait_until(self.all_ready, timeout_s, interval_s=1.0):
            raise RuntimeError(f"servers not ready after {timeout_s:.0f} s: {self._tails()}")
        for role in GATEWAY_HOSTS:
            self._start(role)
        for role in GATEWAY_HOSTS:
            if not wait_until(lambda r=role: http_ok(f"{self.gateway_url(r)}/readyz"), timeout_s):  # type: ignore[misc]
                raise RuntimeError(f"gateway on {role} not ready: {self.processes[role].log_tail()}")
        self._start("dispatcher")
        self._start("probe")

    def _keys(self) -> None:
        var = self.config.var_path
        self.admin_key = ensure_admin_key(var).read_text().strip()
        client = self.redis_admin()
        try:
            paths = ensure_team_keys(SyncKeyStore(client, self.config.teams), var, self.config.teams)
        finally:
            client.close()
        self.team_headers = {team: {"Authorization": f"Bearer {p.read_text().strip()}"} for team, p in paths.items()}

    def probe_path(self) -> Path:
        return self.config.var_path / "partition-acked.txt"

    def _config_file(self, name: str, config: SwitchyardConfig) -> str:
        return str(dump_config(config, self.config.var_path / "run" / f"partitions-{name}.yaml"))

    def _process(self, name: str) -> ManagedProcess:
        """A new process for part `name` (a server id, a gateway host, dispatcher, probe)."""
        config, python, logs = self.config, sys.executable, self.config.var_path / "logs"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if name in GATEWAY_HOSTS:
            host = self.net[name]
            env.update(SWITCHYARD_CONFIG=self._config_file("gateway", config), SWITCHYARD_HOST=host.address,
                       SWITCHYARD_PORT=str(config.gateway.port), SWITCHYARD_WORKERS="1")  # fmt: skip
            return ManagedProcess(
                f"gateway on {name}", host.command([python, "-m", "gateway"]), logs / f"{name}.log", env
            )
        if name == "dispatcher":
            env.update(SWITCHYARD_CONFIG=self._config_file("dispatcher", config),
                       SWITCHYARD_GATEWAY_URL=self.gateway_url(GATEWAY_HOSTS[0]))  # fmt: skip
            argv = self.net[CONTROL_HOST].command([python, "-m", "bulk"])
            return ManagedProcess("dispatcher", argv, logs / "dispatcher.log", env)
        if name == "probe":
            env.update(SWITCHYARD_CONFIG=self._config_file("probe", config))
            argv = self.net[GATEWAY_HOSTS[0]].command([python, "-m", "faults.partition_probe", str(self.probe_path())])
            return ManagedProcess("write probe", argv, logs / "probe.log", env, cwd=CHECKOUT)  # not installed
        pool, copy = name.rsplit("-", 1)
        host = self.net[SERVER_HOSTS[int(copy)]]
        on_host = config.model_copy(update={"network": NetworkSpec(servers=ServerAddresses(bind_host=host.address))})
        path = self._config_file(host.role, on_host)
        argv = [python, "-m", "switchyard.cli", "--config", path, "triton", "--pool", pool, "--copy", copy,
                "--server-id", name, "--register-host", host.address, "--no-fill"]  # fmt: skip
        return ManagedProcess(f"{name} on {host.role}", host.command(argv), logs / f"{name}.log", env)

    def _start(self, name: str) -> None:
        process = self._process(name)
        process.start()
        self.processes[name] = process

    def revive(self) -> list[str]:
        """Start again every part whose process exited (a fenced server exits); their names."""
        revived = []
        for name, process in list(self.processes.items()):
            if not process.alive():
                process.stop(timeout_s=0.0)
                self._start(name)
                self.restarts[name] = self.restarts.get(name, 0) + 1
                revived.append(name)
        return revived

    def gateway_logs(self) -> list[str]:
        return [line for role in GATEWAY_HOSTS for line in self.processes[role].log_text().splitlines()]

    def admin_client(self, role: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.admin_key}"}
        return httpx.AsyncClient(base_url=self.gateway_url(role), headers=headers, timeout=30)

    def _tails(self) -> str:
        return "\n".join(f"--- {n}\n{p.log_tail(1500)}" for n, p in self.processes.items() if not p.alive())

    def stop(self) -> None:
        """Every link healed first (a server deregisters on SIGTERM), then the parts in reverse."""
        self.net.heal_all()
        order = ["probe", "dispatcher", *GATEWAY_HOSTS, *self.server_ids()]
        for name in order:
            process = self.processes.pop(name, None)
            if process is not None:
                process.stop(timeout_s=20.0)
        self.replicas.stop()
