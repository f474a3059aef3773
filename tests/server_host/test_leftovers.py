"""reap_leftovers over a stand-in /proc and /dev/shm (the orphan is a real process we start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from server_host.leftovers import Reaped, reap_leftovers


def fake_process(proc: Path, pid: int, parent: int, cmdline: str) -> None:
    entry = proc / str(pid)
    entry.mkdir(parents=True)
    (entry / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode())
    (entry / "stat").write_text(f"{pid} (triton_python_b) S {parent} 1 1 0")


def test_orphaned_stubs_die_and_unused_regions_go(tmp_path: Path) -> None:
    proc, shm = tmp_path / "proc", tmp_path / "shm"
    shm.mkdir()
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stub = "triton_python_backend_stub model.py switchyard-small-1-{}-4f2a 1048576"
        fake_process(proc, orphan.pid, 1, stub.format("aaaaaaaa"))  # an earlier life: orphaned
        fake_process(proc, 999_999, 4242, stub.format("bbbbbbbb"))  # the live server's stub
        fake_process(proc, 999_998, 1, stub.replace("small-1", "small-2").format("cccccccc"))  # another server
        for region in ("aaaaaaaa-x", "aaaaaaaa-y", "bbbbbbbb-x"):
            (shm / f"switchyard-small-1-{region}").write_bytes(b"")
        (shm / "switchyard-small-2-cccccccc-x").write_bytes(b"")
        assert reap_leftovers("small-1", proc, shm) == Reaped(processes=1, shm_files=2)
        assert orphan.wait(timeout=5) == -9
        assert sorted(p.name for p in shm.iterdir()) == [
            "switchyard-small-1-bbbbbbbb-x",
            "switchyard-small-2-cccccccc-x",
        ]
    finally:
        orphan.kill()
        orphan.wait()


def test_nothing_to_do_without_proc_or_shm(tmp_path: Path) -> None:
    assert reap_leftovers("small-0", tmp_path / "none", tmp_path / "none") == Reaped(0, 0)
