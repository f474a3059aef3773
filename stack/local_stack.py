"""The whole platform on one machine: Redis, Triton per pool, the gateway, the bulk dispatcher.

`switchyard up` (and so `make up`) runs it in the foreground until Ctrl-C; the benchmarks and
the end-to-end tests use the same `Stack` so they measure what `make up` runs.

    Stack.start():  internal secrets (var/secrets: Redis users, Triton's inference key; made
                    once, never regenerated) ─▶ redis-server ─▶ API keys (var/keys/<team>-api-key, var/admin-api-key)
                    ─▶ supervisor: target_copies tritonservers per pool (all started side by
                       side, registered in Redis, restarted when they die) ─▶ gateway ─▶ dispatcher
                    ─▶ with `autoscaler.enabled`: the autoscaler, in this process (its actuator
                       is the supervisor: it adds copies and drains them; docs/autoscaler.md)
    Stack.stop():   the reverse, every process group killed: no orphans
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from config.process_limits import raise_open_files_limit
from config.redis_client import sync_redis_client
from config.settings import SwitchyardConfig, dump_config
from quota.key_files import ensure_admin_key, ensure_team_keys
from quota.keys import SyncKeyStore
from server_host.ports import ConfiguredPorts
from server_host.process import ManagedProcess, http_ok, wait_until
from server_host.signals import stop_on_signals
from stack.redis_server import RedisServer
from stack.secret_files import ensure_secret_files
from supervisor.supervisor_thread import SupervisorThread

if TYPE_CHECKING:
    from autoscaler.autoscaler_thread import AutoscalerThread
    from autoscaler.live import LiveOptions
    from autoscaler.signals import ServerCapacity

# The gateway's worker processes in a stack: two, as deploy/base/gateway.yaml runs it, so that
# what a test or a bench meets is what every worker shares through Redis.
GATEWAY_WORKERS = 2


def redis_data_dir(config: SwitchyardConfig) -> Path:
    """Where a stack's own Redis keeps its data (its append-only file) between runs."""
    return config.var_path / "redis"


class Stack:
    """Start and stop the platform's processes for `config`, on the ports it names.

    `pool_ids` limits which pools get servers (default: every pool with target_copies > 0);
    `gateway_port` overrides the file's; `gateway_workers`: the gateway's worker processes
    (`SWITCHYARD_WORKERS` under `switchyard up`). The models must have been built
    (`switchyard build`).
    Copy k of a pool listens on the pool's ports + 10·k (`ports`, `metrics_url`).
    `autoscaler_options` / `autoscaler_capacities` refine the autoscaler (when enabled) beyond
    what switchyard.yaml says (`autoscaler.live.LiveOptions`, `pool_capacity`).
    """

    def __init__(
        self,
        config: SwitchyardConfig,
        *,
        pool_ids: list[str] | None = None,
        gateway_port: int | None = None,
        gateway_workers: int = GATEWAY_WORKERS,
        with_redis: bool = True,
        autoscaler_options: LiveOptions | None = None,
        autoscaler_capacities: Mapping[str, ServerCapacity] | None = None,
    ) -> None:
        self.config = config
        self.pool_ids = pool_ids or [pid for pid, pool in config.pools.items() if pool.target_copies > 0]
        self.gateway_port = gateway_port or config.gateway.port
        self.gateway_workers = gateway_workers
        self.redis = (
            RedisServer(
                config.redis.port,
                redis_data_dir(config),
                config.var_path / "logs" / "redis.log",
                secrets_dir=config.secrets_path,
                host=config.redis.host,
                maxclients=config.redis.maxclients,
            )
            if with_redis
            else None
        )
        self.ports = ConfiguredPorts(config)
        self.supervisor: SupervisorThread | None = None
        self.gateway: ManagedProcess | None = None
        self.dispatcher: ManagedProcess | None = None
        self.autoscaler: AutoscalerThread | None = None
        self._autoscaler_options = autoscaler_options
        self._autoscaler_capacities = autoscaler_capacities
        self.admin_key_path: Path | None = None
        self.team_key_paths: dict[str, Path] = {}  # set once this stack's Redis holds the teams' keys

    @property
    def default_key_path(self) -> Path | None:
        """The first configured team's key file: the one the printed examples use."""
        return next(iter(self.team_key_paths.values()), None)

    @property
    def gateway_url(self) -> str:
        return f"http://{self.config.gateway.host}:{self.gateway_port}"

    def start(self, timeout_s: float = 180.0) -> None:
        try:
            ensure_secret_files(self.config.secrets_path)  # what the servers and the gateway read
            if self.redis is not None:
                self.redis.start()
                self.ensure_keys()
            self._start_servers(timeout_s)
            self._start_gateway(timeout_s)
            self.start_dispatcher()
            if self.config.autoscaler.enabled:
                self._start_autoscaler()
        except BaseException:
            self.stop()
            raise

    def ensure_keys(self) -> None:
        """The admin key in var/admin-api-key, and a key of each configured team in
        var/keys/<team>-api-key, each reused while it resolves in this stack's Redis."""
        self.admin_key_path = ensure_admin_key(self.config.var_path)
        client = sync_redis_client(self.config, "admin")
        try:
            store = SyncKeyStore(client, self.config.teams)
            self.team_key_paths = ensure_team_keys(store, self.config.var_path, self.config.teams)
        finally:
            client.close()

    def _start_servers(self, timeout_s: float) -> None:
        self.supervisor = SupervisorThread(
            self.config, self.ports, pool_ids=self.pool_ids, config_path=self._config_path()
        )
        self.supervisor.start(timeout_s)

    def _start_autoscaler(self) -> None:
        """In this process: the supervisor actuator sets targets on this stack's supervisor."""
        from autoscaler.actuators import SupervisorActuator
        from autoscaler.autoscaler_thread import AutoscalerThread
        from autoscaler.live import LiveOptions

        assert self.supervisor is not None
        options = self._autoscaler_options or LiveOptions(gateway_metrics_urls=(f"{self.gateway_url}/metrics",))
        self.autoscaler = AutoscalerThread(
            self.config,
            SupervisorActuator(self.supervisor),
            self.pool_ids,
            options,
            capacities=self._autoscaler_capacities,
            log_path=self.config.var_path / "logs" / "autoscaler.log",
        )
        self.autoscaler.start()

    def metrics_url(self, pool_id: str, copy: int = 0) -> str:
        """Prometheus URL of copy `copy` of the pool's servers."""
        host = self.config.network.servers.local  # the servers run on this host
        return f"http://{host}:{self.ports.ports(pool_id, copy).metrics}/metrics"

    def _config_path(self) -> Path:
        return dump_config(self.config, self.config.var_path / "run" / "switchyard.yaml")

    def _environment(self) -> dict[str, str]:
        return {**os.environ, "SWITCHYARD_CONFIG": str(self._config_path()), "PYTHONUNBUFFERED": "1"}

    def start_dispatcher(self) -> None:
        """The bulk dispatcher, submitting through this stack's gateway (tests restart it)."""
        env = {**self._environment(), "SWITCHYARD_GATEWAY_URL": self.gateway_url}
        log = self.config.var_path / "logs" / "dispatcher.log"
        self.dispatcher = ManagedProcess("dispatcher", [sys.executable, "-m", "bulk"], log, env=env)
        self.dispatcher.start()

    def _start_gateway(self, timeout_s: float) -> None:
        env = self._environment()
        env.update(
            SWITCHYARD_HOST=self.config.gateway.host,
            SWITCHYARD_PORT=str(self.gateway_port),
            SWITCHYARD_WORKERS=str(self.gateway_workers),
        )
        self.gateway = ManagedProcess(
            "gateway",
            [sys.executable, "-m", "gateway"],
            self.config.var_path / "logs" / "gateway.log",
            env=env,
        )
        self.gateway.start()
        gateway = self.gateway
        if not wait_until(lambda: self._gateway_ready() or not gateway.alive(), timeout_s):
            raise RuntimeError(f"gateway not ready on {self.gateway_url}:\n{gateway.log_tail()}")
        if not gateway.alive():
            raise RuntimeError(f"gateway exited:\n{gateway.log_tail()}")

    def _gateway_ready(self) -> bool:
        return http_ok(f"{self.gateway_url}/readyz")

    def dead_processes(self) -> list[str]:
        """Names of processes that have exited while the stack should be running (a dead
        Triton server is not one: the supervisor restarts it)."""
        dead = [] if self.supervisor is None or self.supervisor.alive() else ["supervisor"]
        if self.autoscaler is not None and not self.autoscaler.alive():
            dead.append("autoscaler")
        if self.gateway is not None and not self.gateway.alive():
            dead.append("gateway")
        if self.dispatcher is not None and not self.dispatcher.alive():
            dead.append("dispatcher")
        return dead

    def stop(self) -> None:
        if self.autoscaler is not None:  # first: no target set on a supervisor that is stopping
            self.autoscaler.stop()
            self.autoscaler = None
        if self.dispatcher is not None:  # first: its running entries end through the gateway
            self.dispatcher.stop()
            self.dispatcher = None
        if self.gateway is not None:
            self.gateway.stop()
            self.gateway = None
        if self.supervisor is not None:
            self.supervisor.stop()
            self.supervisor = None
        if self.redis is not None:
            self.redis.stop()

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def ready_message(stack: Stack, model_id: str) -> str:
    url = stack.gateway_url
    headers = "-H 'Content-Type: application/json'"
    if stack.default_key_path is not None:
        headers = f'-H "Authorization: Bearer $(cat {_shown(stack.default_key_path)})" {headers}'
    keys = "".join(f"  {team:<12} {_shown(path)}\n" for team, path in stack.team_key_paths.items())
    keys = f"Team keys (switchyard.yaml's teams):\n{keys}" if keys else ""
    keys += "More keys: `switchyard keys create TEAM`"
    if stack.admin_key_path is not None:
        keys += f"; the admin key is in {_shown(stack.admin_key_path)}"
    return (
        f"\nSwitchyard is up: gateway {url}, pools {', '.join(stack.pool_ids)}, logs in "
        f"{stack.config.var_path / 'logs'}\n"
        f"Console: {url}/console  (sign in with a team's key; the admin key sees keys and fleet)\n\n"
        f"  curl -N {url}/v1/generate \\\n    {headers} \\\n"
        f'    -d \'{{"model": "{model_id}", "prompt": "Hello there", "max_tokens": 32, '
        f'"stream": true}}\'\n\n'
        f"{_grpc_door_lines(stack, model_id)}"
        f"  Batches: switchyard batches submit FILE.jsonl --model {model_id} --deadline 6h  (docs/batches.md)\n"
        f"  Servers: switchyard servers; drain one: switchyard drain SERVER\n"
        f"{_autoscaler_line(stack)}\n"
        f"{keys}.\nCtrl-C stops everything.\n"
    )


def _grpc_door_lines(stack: Stack, model_id: str) -> str:
    """A tritonclient example for the gRPC door (docs/grpc.md), when the gateway serves one."""
    port = stack.config.gateway.grpc_port
    if port is None:
        return ""
    path = stack.default_key_path
    key = f"open('{_shown(path)}').read().strip()" if path is not None else "KEY"
    return (
        f"  tritonclient (gRPC door {stack.config.gateway.host}:{port}, docs/grpc.md):\n"
        f"    import numpy as np, tritonclient.grpc as g\n"
        f"    c = g.InferenceServerClient('{stack.config.gateway.host}:{port}')\n"
        f"    t = g.InferInput('text_input', [1], 'BYTES'); t.set_data_from_numpy(np.array([b'Hello there'], object))\n"
        f"    m = g.InferInput('max_tokens', [1], 'INT32'); m.set_data_from_numpy(np.array([32], np.int32))\n"
        f"    r = c.infer('{model_id}', [t, m], headers={{'authorization': 'Bearer ' + {key}}})\n"
        f"    print(r.as_numpy('text_output')[0].decode())\n\n"
    )


def _autoscaler_line(stack: Stack) -> str:
    spec = stack.config.autoscaler
    if not spec.enabled:
        return ""
    port = f", metrics on :{spec.metrics_port}" if spec.metrics_port else ""
    return (
        f"  Autoscaler: on, every {spec.interval_s:g} s{port}; load: switchyard load --ramp "
        f"'0:1,60:6,180:6,240:1' (docs/autoscaler.md)\n"
    )


def _shown(path: Path) -> str:
    """`path` relative to the current folder when it is inside it (what a user pastes)."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(Path.cwd()))
    except ValueError:
        return str(resolved)


def run_stack(config: SwitchyardConfig, gateway_port: int | None = None, gateway_workers: int = GATEWAY_WORKERS) -> int:
    """`switchyard up`: run until SIGINT/SIGTERM or until a process dies; returns an exit code."""
    raise_open_files_limit()  # Redis, the servers and the gateway inherit it
    stack = Stack(config, gateway_port=gateway_port, gateway_workers=gateway_workers)
    with stop_on_signals() as stop:
        return _serve_until_stopped(stack, stop)


def _serve_until_stopped(stack: Stack, stop: threading.Event) -> int:
    config = stack.config
    try:
        print(f"starting redis, triton ({', '.join(stack.pool_ids)}), the gateway and the dispatcher ...", flush=True)
        stack.start()
        print(ready_message(stack, config.pools[stack.pool_ids[0]].model_id), flush=True)
        while not stop.wait(1.0):
            dead = stack.dead_processes()
            if dead:
                print(f"stopping: {', '.join(dead)} exited (see {config.var_path / 'logs'})", file=sys.stderr)
                return 1
        return 0
    except RuntimeError as exc:
        print(f"switchyard up failed: {exc}", file=sys.stderr)
        return 1
    finally:
        print("stopping ...", flush=True)
        stack.stop()
