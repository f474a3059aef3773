"""What a process costs, read from outside it: memory, open files, CPU time (Linux /proc), and
its connections to Redis.

Redis connections per process: Redis's own `CLIENT LIST` says which client addresses are
connected; `ss` (netlink, filtered in the kernel: cheap with tens of thousands of sockets)
says which process holds the socket at each local port. Joined on the port, they count each
process's connections as Redis sees them.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import redis

_SS_LINE = re.compile(r":(\d+)\s+\S+:\d+\s+users:\(\(\"[^\"]*\",pid=(\d+),")


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process at one moment."""

    rss_kb: int
    open_fds: int
    cpu_s: float  # user + system since it started


def children(pid: int) -> list[int]:
    """The processes `pid` started (uvicorn's workers under its supervisor process)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def sample(pid: int) -> ProcessSample | None:
    """`pid` now; None once it has exited (a zombie has no memory left to read)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rss = [line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")]
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    if not rss:
        return None
    cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return ProcessSample(int(rss[0]), fds, cpu_s)


def cpu_seconds(pid: int) -> float | None:
    """`pid`'s user + system CPU time so far, all its threads; None once it has exited."""
    return _stat_cpu_s(Path(f"/proc/{pid}/stat"))


def thread_cpu_seconds(pid: int, name: str) -> float | None:
    """User + system CPU time so far of `pid`'s threads whose OS name
    (`/proc/<pid>/task/<tid>/comm`) is `name`, summed; None when it has no such thread."""
    total: float | None = None
    for task in Path(f"/proc/{pid}/task").glob("[0-9]*"):
        try:
            if (task / "comm").read_text().strip() != name:
                continue
        except (FileNotFoundError, ProcessLookupError):
            continue
        cpu_s = _stat_cpu_s(task / "stat")
        if cpu_s is not None:
            total = (total or 0.0) + cpu_s
    return total


def _stat_cpu_s(path: Path) -> float | None:
    """utime + stime of a `/proc/.../stat` file, in seconds; None when it is gone."""
    try:
        fields = path.read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def samples(pids: list[int]) -> dict[int, ProcessSample]:
    """Those of `pids` still running, sampled."""
    taken = {pid: sample(pid) for pid in pids}
    return {pid: now for pid, now in taken.items() if now is not None}


def redis_connections_by_pid(client: redis.Redis, redis_port: int) -> dict[int, int]:
    """Connections Redis lists (`CLIENT LIST`) by the pid holding their client end; those of
    no process `ss` can see (another user's) under pid 0."""
    listed = client.client_list()
    holder = _holders_of_connections_to(redis_port)
    counts: Counter[int] = Counter()
    for entry in listed:
        port = int(str(entry["addr"]).rsplit(":", 1)[1])
        counts[holder.get(port, 0)] += 1
    return dict(counts)


def _holders_of_connections_to(port: int) -> dict[int, int]:
    """Local port → pid of every established TCP connection to `port`."""
    out = subprocess.run(
        ["ss", "-Htnp", "state", "established", f"( dport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    holders: dict[int, int] = {}
    for line in out.splitlines():
        match = _SS_LINE.search(line)
        if match:
            holders[int(match.group(1))] = int(match.group(2))
    return holders


def served_connections(ports: tuple[int, ...]) -> int:
    """Established TCP connections served on `ports` (their server ends)."""
    served = " or ".join(f"sport = :{port}" for port in ports)
    out = subprocess.run(
        ["ss", "-Htn", "state", "established", f"( {served} )"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    return len(out.splitlines())
