"""A server process that an earlier life of the supervisor started, taken over by pid.

A supervisor that is SIGKILLed leaves its servers running: each `switchyard triton` wrapper
leads a session of its own (`ManagedProcess`), so nothing takes it down with the supervisor,
and its replies go on. The next supervisor finds each server's wrapper pid in the registry;
when that pid is still the `switchyard triton` of the same server id, it takes it over
(`AdoptedProcess`) instead of launching a second server that could not bind the ports
(before this, a restarted supervisor failed to start at all, and the servers it left were
orphans nobody would stop).

Not being its parent, the new supervisor cannot read the exit status: an adopted process that
exits reads as a failure (`UNKNOWN_EXIT`) unless it was draining, which the supervisor knows
from the registry anyway.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from pathlib import Path

from server_host.process import ManagedProcess

UNKNOWN_EXIT = 1  # what `returncode` says of an adopted process that has exited


def server_process(pid: int, server_id: str, proc: Path = Path("/proc")) -> bool:
    """Whether `pid` is alive and is the `switchyard triton` wrapper of `server_id` (a pid
    reused by anything else is not)."""
    try:
        args = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
        state = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state == "Z" or b"triton" not in args:
        return False
    return any(a == b"--server-id" and b == server_id.encode() for a, b in itertools.pairwise(args))


class AdoptedProcess(ManagedProcess):
    """`ManagedProcess`'s interface over a running process this one did not start."""

    def __init__(self, name: str, pid: int, log_path: Path, proc: Path = Path("/proc")) -> None:
        super().__init__(name, [], log_path)
        self._pid = pid
        self._proc = proc
        with contextlib.suppress(OSError):
            self._log_offset = log_path.stat().st_size  # its log from the takeover on

    @property
    def pid(self) -> int | None:
        return self._pid

    def start(self) -> None:
        raise RuntimeError(f"{self.name} is already running (adopted, pid {self._pid})")

    def alive(self) -> bool:
        try:
            state = (self._proc / str(self._pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state != "Z"

    def returncode(self) -> int | None:
        return None if self.alive() else UNKNOWN_EXIT

    def send_signal(self, sig: signal.Signals) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, sig)

    def stop(self, timeout_s: float = 15.0, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """`sig` to its group (it leads one), up to `timeout_s` to go, then SIGKILL."""
        if not self.alive():
            return UNKNOWN_EXIT
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._pid, sig)
        deadline = time.monotonic() + timeout_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._pid, signal.SIGKILL)  # what is left of the group: its stubs
        while self.alive() and time.monotonic() < deadline + 5.0:
            time.sleep(0.05)
        return UNKNOWN_EXIT
