"""What an earlier life of a Triton server can leave behind, and its removal.

A tritonserver killed with SIGKILL (a crash, or the kernel's kill-with-parent when its
`switchyard triton` wrapper is killed) cannot stop its Python backend stubs: they are
re-parented to init and run on, and the shared-memory regions they and the server made stay in
/dev/shm (~1 MB each). Both carry the server's region prefix, `switchyard-<name>-<8 hex>-`
(`TritonServer.command`), so a server's next life, and its wrapper on the way out, remove
whatever of `<name>` no live process of that name still uses.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Reaped:
    processes: int  # orphaned stubs killed
    shm_files: int  # shared-memory regions removed


def reap_leftovers(name: str, proc: Path = Path("/proc"), shm: Path = Path("/dev/shm")) -> Reaped:
    """Kill orphaned (parent: init) processes of server `name`'s earlier lives and remove the
    shared memory that no live process of `name` refers to."""
    pattern = re.compile(rf"switchyard-{re.escape(name)}-([0-9a-f]{{8}})-")
    in_use: set[str] = set()
    killed = 0
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        found = pattern.search(cmdline)
        if found is None:
            continue
        if parent == 1:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        else:
            in_use.add(found.group(1))
    removed = 0
    for region in shm.glob(f"switchyard-{name}-*") if shm.is_dir() else ():
        found = pattern.match(region.name)
        if found is not None and found.group(1) not in in_use:
            try:
                region.unlink()
                removed += 1
            except OSError:
                pass
    return Reaped(killed, removed)
