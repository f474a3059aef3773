"""Run the real `tritonserver` that ships in the `nvidia-pytriton` wheel, for one pool.

(`switchyard triton`, the process that owns one server and drains it on SIGTERM, is
`server_host.server_process`.)

    site-packages/pytriton/tritonserver/            var/triton/backends/python/     (built here)
      bin/tritonserver                                libtriton_python.so            <- copied
      backends/python/libtriton_python.so  ────────▶  triton_python_backend_utils.py <- copied
      python_backend_stubs/3.11/..._stub   ────────▶  triton_python_backend_stub     <- this Python's
    site-packages/nvidia_pytriton.libs/    ── LD_LIBRARY_PATH

The stub runs the `python3` first on PATH, so the venv's `bin/` goes first: the stub then
sees the venv's packages (the project is installed there, so `model.py` imports `bls` and
`engine`). The server runs in its own process group, so stopping it also stops its stub
processes; nothing is left orphaned. Its output goes to `var/logs/triton-<name>.log`.

With an `inference_key`, Triton itself refuses every inference call (gRPC and HTTP, every
model: `llm` and the models behind it) that lacks the header `switchyard-inference-key`
(over gRPC: `triton-grpc-protocol-switchyard-inference-key`) with that value; health,
metadata and metrics stay open for probes. Only the gateway holds the key,
so only the gateway reaches the models, and the fields only it may set (cache namespace,
cancel id) come from it alone (docs/security.md).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType

from config.internal_secrets import TRITON_KEY_HEADER
from config.network_settings import TritonKeepalive, local_host
from config.settings import Ports
from server_host.ports import port_free
from server_host.process import ManagedProcess, http_ok
from server_host.triton_install import TritonInstall, prepare_backend_dir, server_env

_GLOG_ERROR = re.compile(r"^E\d{4} ")
_MAX_ERROR_LINES = 12
# Error lines every CPU-only start prints; they say nothing about why a start failed.
_CPU_ONLY_NOISE = ("CudaDriverHelper has not been initialized",)
# What the inference key guards, besides inference itself: loading and unloading models,
# shared-memory regions, statistics, tracing and logging settings. Health and metadata stay open.
RESTRICTED_APIS = "inference,model-repository,shared-memory,statistics,trace,logging"


class TritonStartError(RuntimeError):
    """The server exited or did not become ready; the message ends with its log tail."""


class TritonServer:
    """One `tritonserver` process serving one pool's model repository.

    Use as a context manager, or `start()` (which waits for readiness) and `stop()`.
    `inference_key`: the value callers must send in the inference header (None: an open
    server, for tests of the models themselves only). `host`: the address it binds
    (`network.servers.bind_host`; 0.0.0.0: every interface); `keepalive`: its gRPC PINGs to
    gateways and what it accepts from theirs (`network.triton_grpc`). `triton_root`: a full
    Triton install to run (`SWITCHYARD_TRITON_ROOT`); None: the wheel's.
    """

    def __init__(
        self,
        repository: Path,
        ports: Ports,
        *,
        var_dir: Path,
        name: str,
        inference_key: str | None,
        host: str,
        keepalive: TritonKeepalive,
        startup_timeout_s: float = 180.0,
        exit_timeout_s: int = 3,
        extra_args: tuple[str, ...] = (),
        die_with_parent: bool = False,
        triton_root: Path | None = None,
    ) -> None:
        self.repository = repository
        self.ports = ports
        self.name = name
        self.host = host
        self.var_dir = var_dir
        self.log_path = var_dir / "logs" / f"triton-{name}.log"
        self._startup_timeout_s = startup_timeout_s
        self._exit_timeout_s = exit_timeout_s
        self._extra_args = extra_args
        self._inference_key = inference_key
        self._keepalive = keepalive
        self._die_with_parent = die_with_parent  # see ManagedProcess: start it from the main thread
        self._triton_root = triton_root
        self._process: ManagedProcess | None = None

    # Where a process on this host reaches the server (loopback for a wildcard bind).

    @property
    def http_url(self) -> str:
        return f"http://{local_host(self.host)}:{self.ports.http}"

    @property
    def grpc_url(self) -> str:
        """host:port, the form `tritonclient.grpc` takes."""
        return f"{local_host(self.host)}:{self.ports.grpc}"

    @property
    def metrics_url(self) -> str:
        return f"http://{local_host(self.host)}:{self.ports.metrics}/metrics"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def command(self, backend_dir: Path, install: TritonInstall) -> list[str]:
        # The Python backend names its shared-memory regions by prefix: make it unique per
        # server, or two servers on one machine collide in /dev/shm.
        shm_prefix = f"switchyard-{self.name}-{uuid.uuid4().hex[:8]}-"
        return [
            str(install.server_bin),
            f"--model-repository={self.repository}",
            f"--backend-directory={backend_dir}",
            f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
            f"--http-address={self.host}",
            f"--http-port={self.ports.http}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.ports.grpc}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.ports.metrics}",
            "--allow-metrics=true",
            "--allow-cpu-metrics=false",
            "--allow-gpu-metrics=false",
            f"--exit-timeout-secs={self._exit_timeout_s}",
            "--disable-auto-complete-config",
            "--log-verbose=0",
            *self._keepalive.server_args(),
            *self._restriction_args(),
            *self._extra_args,
        ]

    def _restriction_args(self) -> list[str]:
        if self._inference_key is None:
            return []
        guard = f"{RESTRICTED_APIS}:{TRITON_KEY_HEADER}={self._inference_key}"
        return [f"--grpc-restricted-protocol={guard}", f"--http-restricted-api={guard}"]

    def start(self, cancel: threading.Event | None = None) -> None:
        """Launch the server and wait until it is ready; TritonStartError otherwise (also when
        `cancel` is set meanwhile: the server is stopped)."""
        if self._process is not None and self._process.alive():
            raise RuntimeError(f"triton server {self.name!r} already started")
        if not (self.repository / "llm" / "config.pbtxt").is_file():
            raise TritonStartError(f"{self.repository} is not a filled model repository (run switchyard build)")
        self._check_ports_free()
        install = TritonInstall.find(self._triton_root)
        backend_dir = prepare_backend_dir(self.var_dir, install)
        self._process = ManagedProcess(
            f"triton {self.name}",
            self.command(backend_dir, install),
            self.log_path,
            env=server_env(install),
            cwd=self.var_dir,
            die_with_parent=self._die_with_parent,
        )
        self._process.start()
        try:
            self.wait_ready(self._startup_timeout_s, cancel)
        except BaseException:
            self.stop()
            raise

    def _check_ports_free(self) -> None:
        """Refuse to start on a taken port: readiness would be answered by the other server."""
        for kind, port in (("http", self.ports.http), ("grpc", self.ports.grpc), ("metrics", self.ports.metrics)):
            if not port_free(self.host, port):
                raise TritonStartError(
                    f"{kind} port {port} on {self.host} is taken: another server runs there; "
                    "stop it or choose other ports"
                )

    def is_ready(self) -> bool:
        return http_ok(f"{self.http_url}/v2/health/ready")

    def wait_ready(self, timeout_s: float, cancel: threading.Event | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if cancel is not None and cancel.is_set():
                raise TritonStartError(f"start of tritonserver {self.name!r} cancelled")
            code = self.poll()
            if code is not None:
                raise TritonStartError(f"tritonserver {self.name!r} exited with code {code}\n{self.log_tail()}")
            if self.is_ready() and self.poll() is None:
                return
            time.sleep(0.2)
        raise TritonStartError(f"tritonserver {self.name!r} not ready after {timeout_s:.0f} s\n{self.log_tail()}")

    def poll(self) -> int | None:
        """The exit code once the server has exited; None while it runs (or never started)."""
        return None if self._process is None else self._process.returncode()

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM the process group (server and stubs), wait, then SIGKILL whatever is left."""
        return None if self._process is None else self._process.stop(timeout_s)

    def log_tail(self, max_chars: int = 4000) -> str:
        """This run's error lines, then the end of its log: what an error message needs.

        Triton prints big status tables after a failed load, so the tail alone often misses
        the cause; glog error lines (`E1129 ...`) carry it.
        """
        if self._process is None:
            return f"(server {self.name!r} never started; log at {self.log_path})"
        text = self._process.log_text()
        errors = [
            line[:600]
            for line in text.splitlines()
            if _GLOG_ERROR.match(line) and not any(noise in line for noise in _CPU_ONLY_NOISE)
        ]
        head = "\n".join(["--- errors ---", *errors[-_MAX_ERROR_LINES:]]) + "\n" if errors else ""
        return f"{head}--- {self.log_path} (tail) ---\n{text[-max_chars:]}"

    def __enter__(self) -> TritonServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
