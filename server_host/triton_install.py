"""Where Triton is installed, and the backend folder and environment a server needs (see
server_host/triton_server.py for the picture).

By default the `nvidia-pytriton` wheel's server (CPU machines, `make up`, the tests). On a GPU
host set `SWITCHYARD_TRITON_ROOT` to a full Triton install such as NGC's `/opt/tritonserver`:
its server and Python backend are used, and its other backends (`tensorrtllm`, the legacy GPU
path's C++ backend) are linked in beside the Python one.

Nothing in site-packages is modified: the Python backend is copied, with the stub for the
running Python next to it, into `var/triton/backends/python/`.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from config.environment import SwitchyardEnvironment, variable_name

REPO_ROOT = Path(__file__).resolve().parents[1]
TRITON_ROOT_ENV = variable_name(SwitchyardEnvironment, "triton_root")


@dataclass(frozen=True, slots=True)
class TritonInstall:
    """Where the wheel keeps the server, the Python backend and its stub."""

    server_bin: Path
    backend_lib: Path
    backend_utils: Path
    stub: Path
    libs_dir: Path
    other_backends: tuple[Path, ...] = ()  # backend folders besides python's, linked as they are

    @classmethod
    def find(cls, root: Path | None = None, python_version: str | None = None) -> TritonInstall:
        """The full install at `root` (`SWITCHYARD_TRITON_ROOT`) when given, else the wheel's."""
        return cls.of_root(root) if root is not None else cls.of_wheel(python_version)

    @classmethod
    def of_root(cls, root: Path) -> TritonInstall:
        """A full Triton install (NGC's /opt/tritonserver layout)."""
        python_dir = root / "backends" / "python"
        install = cls(
            server_bin=root / "bin" / "tritonserver",
            backend_lib=python_dir / "libtriton_python.so",
            backend_utils=python_dir / "triton_python_backend_utils.py",
            stub=python_dir / "triton_python_backend_stub",
            libs_dir=root / "lib",
            other_backends=tuple(
                sorted(path for path in (root / "backends").iterdir() if path.is_dir() and path.name != "python")
            )
            if (root / "backends").is_dir()
            else (),
        )
        for path in (install.server_bin, install.backend_lib, install.backend_utils, install.stub):
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing: is {TRITON_ROOT_ENV}={root} a Triton install?")
        return install

    @classmethod
    def of_wheel(cls, python_version: str | None = None) -> TritonInstall:
        import pytriton  # the wheel; only its files are used

        version = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
        root = Path(pytriton.__file__).resolve().parent / "tritonserver"
        install = cls(
            server_bin=root / "bin" / "tritonserver",
            backend_lib=root / "backends" / "python" / "libtriton_python.so",
            backend_utils=root / "backends" / "python" / "triton_python_backend_utils.py",
            stub=root / "python_backend_stubs" / version / "triton_python_backend_stub",
            libs_dir=root.parent.parent / "nvidia_pytriton.libs",
        )
        for path in (install.server_bin, install.backend_lib, install.backend_utils, install.stub, install.libs_dir):
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing: is nvidia-pytriton==0.7.0 installed for Python {version}?")
        return install


def _copy_if_changed(src: Path, dst: Path) -> None:
    """Copy atomically (two servers may prepare the same folder at once)."""
    if dst.exists() and dst.stat().st_size == src.stat().st_size and dst.read_bytes() == src.read_bytes():
        return
    tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:8]}")
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def prepare_backend_dir(var_dir: Path, install: TritonInstall) -> Path:
    """Build `var/triton/backends/python/`; return the folder to pass as --backend-directory."""
    backends = var_dir / "triton" / "backends"
    python_dir = backends / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    _copy_if_changed(install.backend_lib, python_dir / "libtriton_python.so")
    _copy_if_changed(install.backend_utils, python_dir / "triton_python_backend_utils.py")
    _copy_if_changed(install.stub, python_dir / "triton_python_backend_stub")
    for backend in install.other_backends:
        link = backends / backend.name
        if not link.is_symlink() or link.resolve() != backend.resolve():
            tmp = backends / f".{backend.name}.{uuid.uuid4().hex[:8]}"
            tmp.symlink_to(backend, target_is_directory=True)
            os.replace(tmp, link)
    return backends


def server_env(install: TritonInstall, base: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: this venv's python3 first, the wheel's libs, the repo root,
    and one BLAS thread per model process unless the environment names another count."""
    env = dict(os.environ if base is None else base)
    venv_bin = Path(sys.prefix) / "bin"
    env["PATH"] = os.pathsep.join(p for p in (str(venv_bin), env.get("PATH", "")) if p)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(install.libs_dir), env.get("LD_LIBRARY_PATH", "")) if p)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The CPU engine's matrices are small: a second OpenBLAS thread made its steps no faster
    # while it spun on a core that Triton, `llm` and the gateway needed to relay the replies.
    # One thread: S1's short request 25-45 % faster idle and loaded, the long replies' tokens/s
    # up 10-30 % (docs/latency.md). A server runs several numpy stubs; each would start a
    # thread per core.
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env
