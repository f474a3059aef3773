"""The processes a streamed response passes, found from outside (Linux /proc), and their CPU
over a window.

    bench process (the stack's supervisor thread)
    ├── switchyard triton (server host: load publisher)      not relay
    │   └── tritonserver                                     relay
    │       ├── triton_python_backend_stub …/cpu_engine/1/model.py
    │       │     the engine-step thread: the engine's own work, not relay; the rest (the
    │       │     sender, Triton's execute) relay
    │       ├── triton_python_backend_stub …/llm/1/model.py             relay
    │       │     (with the engine inside it, the default: its engine-step thread not relay)
    │       └── … preprocessing / postprocessing, when loaded         relay
    ├── python -m gateway (uvicorn's supervisor)              not relay
    │   └── its workers                                       relay
    └── redis-server                                          not relay (per request, not per response)

"Relay" is what carries a response from the engine's step to the client: the issue's
"between the engine and the client". The client itself is counted apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from bench.process_stats import cpu_seconds, thread_cpu_seconds

ENGINE_THREAD = "engine-step"  # engine/engine_loop.py names its step thread so in the OS
ENGINE_STUB = "cpu_engine"
_STUB = "triton_python_backend_stub"


@dataclass(frozen=True, slots=True)
class ServingProcess:
    """One process measured: its role in the table, and whether it is part of the relay."""

    role: str
    pid: int
    relay: bool


@dataclass(frozen=True, slots=True)
class _Proc:
    pid: int
    ppid: int
    comm: str
    argv: tuple[str, ...]


def _processes(proc: Path = Path("/proc")) -> list[_Proc]:
    found = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            comm = text[text.index("(") + 1 : text.rindex(")")]
            fields = text[text.rindex(")") + 2 :].split()
            argv = (stat.parent / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except (OSError, ValueError):
            continue
        if fields[0] == "Z":
            continue
        found.append(
            _Proc(int(stat.parent.name), int(fields[1]), comm, tuple(a.decode(errors="replace") for a in argv))
        )
    return found


def _descendants(root: int, procs: list[_Proc]) -> list[_Proc]:
    by_parent: dict[int, list[_Proc]] = {}
    for p in procs:
        by_parent.setdefault(p.ppid, []).append(p)
    out: list[_Proc] = []
    todo = [root]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            out.append(child)
            todo.append(child.pid)
    return out


def _stub_model(p: _Proc) -> str | None:
    """The model a Python backend stub runs: its first argument is `<repo>/<model>/<version>/model.py`."""
    if not p.argv or not p.argv[0].endswith(_STUB) or len(p.argv) < 2:
        return None
    return Path(p.argv[1]).parent.parent.name


def find_serving_processes(root_pid: int, gateway_pid: int | None, via_gateway: bool = True) -> list[ServingProcess]:
    """The stack's processes under `root_pid` (the bench, which started the stack), by role:
    each tritonserver, its host process and its stubs; the gateway's supervisor and workers
    (under `gateway_pid`: relay only `via_gateway`, else measured but off the path); Redis.
    More than one server: roles numbered by server."""
    procs = _processes()
    below = _descendants(root_pid, procs)
    found: list[ServingProcess] = []
    servers = [p for p in below if p.comm == "tritonserver"]
    by_pid = {p.pid: p for p in procs}
    for n, server in enumerate(servers):
        tag = "" if len(servers) == 1 else f" {n}"
        host = by_pid.get(server.ppid)
        if host is not None and host.pid != root_pid:
            found.append(ServingProcess(f"server host{tag}", host.pid, relay=False))
        found.append(ServingProcess(f"tritonserver{tag}", server.pid, relay=True))
        stubs = [(model, p.pid) for p in _descendants(server.pid, procs) if (model := _stub_model(p)) is not None]
        found += [ServingProcess(f"stub {model}{tag}", pid, relay=True) for model, pid in sorted(stubs)]
    if gateway_pid is not None:
        found.append(ServingProcess("gateway supervisor", gateway_pid, relay=False))
        workers = [p for p in _descendants(gateway_pid, procs) if not any("resource_tracker" in a for a in p.argv)]
        found += [ServingProcess(f"gateway worker {k}", p.pid, relay=via_gateway) for k, p in enumerate(workers)]
    found += [ServingProcess("redis", p.pid, relay=False) for p in below if p.comm == "redis-server"]
    return found


def engine_stubs(processes: list[ServingProcess]) -> list[ServingProcess]:
    """The stubs that may run the engine (`cpu_engine`'s, or `llm`'s own when the engine runs
    inside it): in whichever has one, the `engine-step` thread is the engine's work."""
    return [p for p in processes if p.role.split(" ")[:2] in (["stub", ENGINE_STUB], ["stub", "llm"])]


@dataclass(frozen=True, slots=True)
class CpuSnapshot:
    """Every process's CPU seconds so far, and the engine step threads', at one moment."""

    at: float  # time.monotonic(): the same clock in every process of the machine
    process_s: dict[int, float]
    engine_thread_s: dict[int, float]  # engine stub pid -> its step thread's


def snapshot(processes: list[ServingProcess], engine_pids: list[int]) -> CpuSnapshot:
    process_s = {p.pid: cpu for p in processes if (cpu := cpu_seconds(p.pid)) is not None}
    threads = {pid: cpu for pid in engine_pids if (cpu := thread_cpu_seconds(pid, ENGINE_THREAD)) is not None}
    return CpuSnapshot(time.monotonic(), process_s, threads)


@dataclass(frozen=True, slots=True)
class WindowCpu:
    """CPU seconds each process (by role) and each engine step thread spent in a window."""

    wall_s: float
    by_role: dict[str, float]
    relay_roles: frozenset[str]
    engine_thread_s: float | None  # None: no engine stub with a named step thread (not the CPU engine)

    @property
    def relay_s(self) -> float | None:
        """The relay's CPU: the relay processes' less the engine's own step work inside them."""
        if self.engine_thread_s is None:
            return None
        return sum(s for role, s in self.by_role.items() if role in self.relay_roles) - self.engine_thread_s

    def quieter(self, other: WindowCpu) -> WindowCpu:
        """Of two idle windows, each process's lower rate, scaled to this window's length: a
        process caught at a transient in one (a worker's first refresh after the start, a
        flush after the last stream) is read from the other."""
        scale = self.wall_s / other.wall_s
        by_role = {role: min(s, other.by_role.get(role, s / scale) * scale) for role, s in self.by_role.items()}
        engine = self.engine_thread_s
        if engine is not None and other.engine_thread_s is not None:
            engine = min(engine, other.engine_thread_s * scale)
        return WindowCpu(self.wall_s, by_role, self.relay_roles, engine)

    def less_idle(self, idle: WindowCpu) -> WindowCpu:
        """What streaming added: each process's CPU less what it spends idle over as long a
        window (`idle`: the same stack with nothing streaming). A server host probing its
        server ten times a second, a gateway worker refreshing its view of the fleet, a stub's
        health thread cost the same with no reply at all; divided by the responses of a window
        they read as relay, more so the fewer responses a second the server sends."""
        scale = self.wall_s / idle.wall_s
        by_role = {role: s - idle.by_role.get(role, 0.0) * scale for role, s in self.by_role.items()}
        engine = self.engine_thread_s
        if engine is not None and idle.engine_thread_s is not None:
            engine -= idle.engine_thread_s * scale
        return WindowCpu(self.wall_s, by_role, self.relay_roles, engine)


def window_cpu(processes: list[ServingProcess], before: CpuSnapshot, after: CpuSnapshot) -> WindowCpu:
    """What happened between two snapshots; a process that exited in between counts as 0."""
    by_role = {
        p.role: after.process_s[p.pid] - before.process_s[p.pid]
        for p in processes
        if p.pid in before.process_s and p.pid in after.process_s
    }
    shared = before.engine_thread_s.keys() & after.engine_thread_s.keys()
    engine = sum(after.engine_thread_s[pid] - before.engine_thread_s[pid] for pid in shared) if shared else None
    relay = frozenset(p.role for p in processes if p.relay)
    return WindowCpu(after.at - before.at, by_role, relay, engine)
