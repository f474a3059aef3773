"""A child process the platform owns: started in its own process group with its output in a
log file, and stopped with everything it spawned (Triton's Python stubs, uvicorn workers), so
Ctrl-C never leaves orphans behind.

A child that must not outlive its parent even when the parent is SIGKILLed (tritonserver under
its `switchyard triton` wrapper) asks the kernel for it: `die_with_parent` (Linux
PR_SET_PDEATHSIG). The kernel ties that to the *thread* that started the child, so start such
a child from a thread that lives as long as the parent (the main thread).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType


class ManagedProcess:
    """One long-running child: `start()`, `alive()`, `stop()`; usable as a context manager."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.die_with_parent = die_with_parent
        self._popen: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def start(self) -> None:
        if self._popen is not None:
            raise RuntimeError(f"{self.name} already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._log_offset = log.tell()
            log.write(f"=== switchyard: starting {self.name} at {time.ctime()} ===\n".encode())
            log.flush()
            self._popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,  # own process group: stop() reaches its children
                preexec_fn=_kill_me_with_my_parent(os.getpid()) if self.die_with_parent else None,
            )
        # A parent that exits without stop() (an exception in a script) must not leave the
        # child behind holding its ports. A SIGKILLed parent still can.
        atexit.register(self.stop)

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen else None

    def log_text(self) -> str:
        """Everything this run of the process has logged (earlier runs' lines excluded)."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return log.read().decode("utf-8", errors="replace")
        except OSError as exc:
            return f"(no log at {self.log_path}: {exc})"

    def log_tail(self, max_chars: int = 4000) -> str:
        """The end of this run's log, for error messages that say what went wrong."""
        return f"--- {self.log_path} (tail) ---\n{self.log_text()[-max_chars:]}"

    def send_signal(self, sig: signal.Signals) -> None:
        """Signal the process itself (not its group), e.g. SIGTERM to ask it to drain."""
        if self._popen is not None and self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(sig)

    def stop(self, timeout_s: float = 15.0, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """Send `sig` to the whole group, wait up to `timeout_s`, then SIGKILL what is left.

        Returns the exit code, or None if the process was not running."""
        popen, self._popen = self._popen, None
        if popen is None:
            return None
        atexit.unregister(self.stop)
        pgid = popen.pid  # start_new_session: the child leads its own group
        if popen.poll() is None:
            _signal_group(pgid, sig)
            try:
                popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(pgid, signal.SIGKILL)
                popen.wait(timeout=5)
        # Children that outlived their parent (a stub whose server died) still share the group.
        _signal_group(pgid, signal.SIGKILL)
        return popen.returncode

    def __enter__(self) -> ManagedProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _kill_me_with_my_parent(parent_pid: int) -> Callable[[], None]:
    """A preexec_fn: SIGKILL this child when the thread that started it exits."""

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork
    pr_set_pdeathsig = 1

    def arm() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return arm


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.2) -> bool:
    """Poll `predicate()` until it is true or `timeout_s` passes; returns whether it became true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """Whether `url` answers 200 now (a readiness probe): any failure to connect is a no."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False
