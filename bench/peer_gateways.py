"""The gateways `bench peers` compares, each started on free ports and stopped again.

    upstream     bench/paced_upstream.py: the bare upstream every peer forwards to
    switchyard   the project's gateway as `make up` runs it (bench/concurrency_rig.py: uvicorn,
                 `stack.local_stack.GATEWAY_WORKERS` workers, real Redis with ACL users, a key
                 per team) over its paced backend at the same pace (no upstream hop)
    litellm      LiteLLM proxy (`litellm[proxy]`), its default one uvicorn worker, the model as
                 `openai/paced` at the upstream; a key with rpm/tpm limits enforced in Redis
    smg          SGLang's model gateway (Rust), `smg launch --worker-urls` at the upstream
    vllm-router  vLLM's router (Rust), `vllm-router --worker-urls` at the upstream

Each peer lives in a venv of its own, `var/peers/<name>/`, made (`python -m venv` + pip from
the package registry) the first time it is needed; never in the project's. A peer that cannot
be installed or started raises `PeerUnavailable`, which the bench reports as the peer's row.

LiteLLM's virtual keys live in its Postgres database (Prisma, whose engines are downloaded at
run time: neither is at hand here). Its per-key limits are enforced all the same: a custom
auth function (its documented hook) hands every request of the bench's key the key's
rpm/tpm limits, and the proxy's parallel-request limiter counts them in Redis
(`general_settings.coordination_redis`, the same Redis, ACL user and AOF as the project's).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml
from redis import Redis

from bench.concurrency_rig import REPO_ROOT, RigSettings, running_rig
from bench.peer_clients import completion_body
from bench.process_stats import children
from server_host.ports import free_ports
from server_host.process import ManagedProcess, wait_until
from stack.local_stack import GATEWAY_WORKERS
from stack.redis_server import RedisServer

PEERS_DIR = REPO_ROOT / "var" / "peers"
# name → (the pip requirement, the console script it installs)
PEERS = {
    "litellm": ("litellm[proxy]", "litellm"),
    "smg": ("smg", "smg"),
    "vllm-router": ("vllm-router", "vllm-router"),
}
UPSTREAM_MODEL = "paced"
SWITCHYARD_TEAM = "load"
# Per-key limits, on but far above any step: what is measured is their cost, not a refusal.
KEY_RPM = 1_000_000
KEY_TPM = 1_000_000_000
INSTALL_TIMEOUT_S = 1200.0
START_TIMEOUT_S = 120.0


class PeerUnavailable(Exception):
    """A gateway that could not be installed or started; the message says why."""


@dataclass(frozen=True, slots=True)
class Gateway:
    """A running gateway: where to send requests and as whom, and the processes that are it."""

    name: str
    port: int
    api_key: str
    model: str
    root_pid: int
    redis_pid: int | None  # the Redis it keeps its limits in, if any
    version: str

    def pids(self) -> list[int]:
        """The gateway's processes now: its first one and every descendant."""
        found, todo = [], [self.root_pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children(pid))
        return found


def peer_executable(name: str, log_dir: Path) -> Path:
    """The peer's console script, installing it into `var/peers/<name>/` first if missing."""
    requirement, script = PEERS[name]
    venv = PEERS_DIR / name
    executable = venv / "bin" / script
    if executable.exists():
        return executable
    log = log_dir / f"install-{name}.log"
    print(f"peers: installing {requirement} into {venv} (log: {log}) ...", file=sys.stderr, flush=True)
    commands = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(venv / "bin" / "pip"), "install", requirement],
    ]
    with log.open("ab") as out:
        for command in commands:
            try:
                done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise PeerUnavailable(f"installing {requirement} took over {INSTALL_TIMEOUT_S:g} s") from None
            if done.returncode != 0:
                raise PeerUnavailable(f"`{' '.join(command[-3:])}` failed ({done.returncode}): see {log}")
    if not executable.exists():
        raise PeerUnavailable(f"{requirement} installed no `{script}`")
    return executable


def peer_version(name: str) -> str:
    requirement = PEERS[name][0].split("[")[0]
    done = subprocess.run(
        [
            str(PEERS_DIR / name / "bin" / "python"),
            "-c",
            f"import importlib.metadata as m; print(m.version({requirement!r}))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.strip() or "?"


def answers(port: int, api_key: str, model: str) -> bool:
    """Whether a one-token completions request through the gateway on `port` comes back 200."""
    with contextlib.suppress(httpx.HTTPError):
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            json=completion_body(model, 1, False),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=10,
        )
        return response.status_code == 200
    return False


def _started(process: ManagedProcess, port: int, api_key: str, model: str) -> None:
    if not wait_until(lambda: answers(port, api_key, model) or not process.alive(), START_TIMEOUT_S, 0.5):
        raise PeerUnavailable(f"{process.name} did not answer within {START_TIMEOUT_S:g} s:\n{process.log_tail(1500)}")
    if not process.alive():
        raise PeerUnavailable(f"{process.name} exited ({process.returncode()}):\n{process.log_tail(1500)}")


@contextlib.contextmanager
def running_upstream(root: Path, first_ms: float, gap_ms: float) -> Iterator[Gateway]:
    """The paced upstream, as a gateway of its own (the bare one the peers are measured over)."""
    (port,) = free_ports(1)
    argv = [sys.executable, "-m", "bench.paced_upstream", "--port", str(port)]
    argv += ["--first-ms", str(first_ms), "--gap-ms", str(gap_ms)]
    with ManagedProcess("upstream", argv, root / "upstream.log", cwd=REPO_ROOT) as process:
        _started(process, port, "none", UPSTREAM_MODEL)
        assert process.pid is not None
        yield Gateway("upstream", port, "none", UPSTREAM_MODEL, process.pid, None, "bench")


@contextlib.contextmanager
def running_switchyard(root: Path, first_s: float, gap_s: float) -> Iterator[Gateway]:
    settings = RigSettings(GATEWAY_WORKERS, None, None, {SWITCHYARD_TEAM: 1.0}, pace=f"{first_s},{gap_s},{gap_s}")
    with running_rig(settings, root) as rig:
        redis_pid = int(rig.admin.info("server")["process_id"])
        key = rig.keys[SWITCHYARD_TEAM]
        if not answers(rig.http_port, key, "small"):
            reply = httpx.post(
                f"http://127.0.0.1:{rig.http_port}/v1/completions",
                json=completion_body("small", 1, False),
                headers={"Authorization": f"Bearer {key}"},
                timeout=10,
            )
            raise PeerUnavailable(
                f"the project's gateway refused a completions request: {reply.status_code} {reply.text[:500]}"
            )
        workers = f"{GATEWAY_WORKERS} uvicorn workers"
        yield Gateway("switchyard", rig.http_port, key, "small", rig.supervisor_pid, redis_pid, workers)


def _litellm_files(root: Path, upstream_port: int, redis: RedisServer, api_key: str) -> Path:
    """LiteLLM's config.yaml and its custom auth module (next to it, where it looks)."""
    (root / "bench_key_auth.py").write_text(
        textwrap.dedent(f'''
        """The bench's one key and its limits (no database for virtual keys here)."""
        from fastapi import HTTPException, Request
        from litellm.proxy._types import UserAPIKeyAuth


        async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
            if api_key != {api_key!r}:
                raise HTTPException(status_code=401, detail="invalid key")
            return UserAPIKeyAuth(
                api_key=api_key, token="bench-key", key_alias="bench", rpm_limit={KEY_RPM}, tpm_limit={KEY_TPM}
            )
        ''').lstrip()
    )
    config = {
        "model_list": [
            {
                "model_name": UPSTREAM_MODEL,
                "litellm_params": {
                    "model": f"openai/{UPSTREAM_MODEL}",
                    "api_base": f"http://127.0.0.1:{upstream_port}/v1",
                    "api_key": "none",
                },
            }
        ],
        "general_settings": {
            "master_key": "sk-bench-master",
            "custom_auth": "bench_key_auth.user_api_key_auth",
            "coordination_redis": {
                "host": "127.0.0.1",
                "port": redis.port,
                "username": "admin",
                "password": redis.secrets.redis_passwords["admin"],
            },
        },
    }
    path = root / "litellm.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@contextlib.contextmanager
def running_litellm(root: Path, upstream_port: int) -> Iterator[Gateway]:
    executable = peer_executable("litellm", root)
    port, redis_port = free_ports(2)
    redis = RedisServer(redis_port, root / "redis", root / "redis.log", secrets_dir=root / "secrets")
    redis.start()
    try:
        api_key = "sk-bench-key"
        config = _litellm_files(root, upstream_port, redis, api_key)
        # Offline: the model cost map shipped in the package, no telemetry.
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
        argv = [str(executable), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
        with ManagedProcess("litellm", argv, root / "litellm.log", env=env, cwd=root) as process:
            _started(process, port, api_key, UPSTREAM_MODEL)
            assert process.pid is not None
            with Redis.from_url(redis.url) as client:
                redis_pid = int(client.info("server")["process_id"])
            yield Gateway("litellm", port, api_key, UPSTREAM_MODEL, process.pid, redis_pid, peer_version("litellm"))
    finally:
        redis.stop()


@contextlib.contextmanager
def running_router(name: str, root: Path, upstream_port: int) -> Iterator[Gateway]:
    """smg or vllm-router: a Rust router in front of the upstream as its one worker, its
    defaults otherwise (the Prometheus port moved to a free one)."""
    executable = peer_executable(name, root)
    port, metrics_port = free_ports(2)
    argv = [str(executable), *(["launch"] if name == "smg" else [])]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(metrics_port)]
    argv += ["--worker-urls", f"http://127.0.0.1:{upstream_port}"]
    with ManagedProcess(name, argv, root / f"{name}.log", cwd=root) as process:
        _started(process, port, "none", UPSTREAM_MODEL)
        assert process.pid is not None
        yield Gateway(name, port, "none", UPSTREAM_MODEL, process.pid, None, peer_version(name))
