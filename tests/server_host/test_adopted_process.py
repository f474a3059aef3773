"""AdoptedProcess: a server left running by a killed supervisor is recognised by its pid and
server id, taken over, and stopped with its whole group (the chaos run's kill-supervisor
fault: before, the restarted supervisor relaunched on taken ports and never started)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from server_host.adopted_process import UNKNOWN_EXIT, AdoptedProcess, server_process

# Stands in for `python -m switchyard.cli ... triton --server-id p-0`: a wrapper with a child.
CHILD = "import time; time.sleep(60)"
WRAPPER = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {CHILD!r}]); time.sleep(60)"


@pytest.fixture
def wrapper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", WRAPPER, "triton", "--server-id", "p-0"], start_new_session=True)
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    deadline = time.monotonic() + 30
    while b"--server-id" not in cmdline.read_bytes() and time.monotonic() < deadline:  # exec'd
        time.sleep(0.01)
    yield process
    process.kill()
    process.wait()


def _group(pgid: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def test_the_wrapper_of_the_same_server_is_recognised(wrapper: subprocess.Popen[bytes]) -> None:
    assert server_process(wrapper.pid, "p-0")
    assert not server_process(wrapper.pid, "p-1")  # another server's id
    assert not server_process(wrapper.pid, "p")  # a prefix is not the id


def test_a_pid_that_is_gone_is_not_a_server(wrapper: subprocess.Popen[bytes]) -> None:
    wrapper.kill()
    wrapper.wait()
    assert not server_process(wrapper.pid, "p-0")


def test_an_adopted_server_is_stopped_with_its_group(wrapper: subprocess.Popen[bytes], tmp_path: Path) -> None:
    deadline = time.monotonic() + 30
    while len(_group(wrapper.pid)) < 2 and time.monotonic() < deadline:  # its child started
        time.sleep(0.05)
    adopted = AdoptedProcess("server p-0", wrapper.pid, tmp_path / "server.log")
    assert adopted.alive() and adopted.returncode() is None and adopted.pid == wrapper.pid
    with pytest.raises(RuntimeError):
        adopted.start()
    assert adopted.stop(timeout_s=10.0) == UNKNOWN_EXIT
    wrapper.wait(timeout=10)  # reaped here (its parent in this test), as init reaps it in the fleet
    assert _group(wrapper.pid) == []
    assert not adopted.alive() and adopted.returncode() == UNKNOWN_EXIT
