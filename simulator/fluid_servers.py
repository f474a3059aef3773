"""Servers without engines, for the fast mode: only their lifecycle and the GPU-seconds it costs.

start ─▶ STARTING ── startup_s ──▶ READY ── drain ──▶ DRAINING ── drain_s ──▶ gone
             └──────── cancelled (scale-in takes starting servers first) ───────▶ gone
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from fleet_state.server_state import ServerState
from simulator.recorder import Recorder


@dataclass(slots=True)
class FluidServer:
    server_id: int
    state: ServerState
    created_s: float
    until_s: float  # ready at (STARTING) or gone at (DRAINING)


class FluidServers:
    """The pool's servers by state; accounts GPU-seconds into the recorder as time passes."""

    def __init__(self, recorder: Recorder, kv_capacity_tokens: int) -> None:
        self.recorder = recorder
        self.kv_capacity_tokens = kv_capacity_tokens
        self.servers: list[FluidServer] = []
        self._next_id = 0
        self.counts = {state: 0 for state in ServerState}

    def _set(self, server: FluidServer, state: ServerState) -> None:
        self.counts[server.state] -= 1
        server.state = state
        self.counts[state] += 1

    def add(self, now: float, *, ready_at: float) -> None:
        state = ServerState.READY if ready_at <= now else ServerState.STARTING
        self.servers.append(FluidServer(self._next_id, state, now, ready_at))
        self.counts[state] += 1
        self._next_id += 1

    @property
    def ready(self) -> int:
        return self.counts[ServerState.READY]

    @property
    def starting(self) -> int:
        return self.counts[ServerState.STARTING]

    @property
    def draining(self) -> int:
        return self.counts[ServerState.DRAINING]

    def advance(self, now: float, dt: float) -> None:
        """Account the last `dt` seconds, then move servers whose time has come."""
        rec = self.recorder
        paid = self.ready + self.starting + self.draining
        rec.paid_gpu_s += paid * dt
        rec.ready_gpu_s += self.ready * dt
        rec.kv_capacity_token_s += paid * dt * self.kv_capacity_tokens
        rec.peak_servers = max(rec.peak_servers, paid)
        if not (self.starting or self.draining):
            return
        for server in self.servers:
            if server.state is ServerState.STARTING and server.until_s <= now:
                self._set(server, ServerState.READY)
            elif server.state is ServerState.DRAINING and server.until_s <= now:
                self._set(server, ServerState.DEAD)
        self.servers = [s for s in self.servers if s.state is not ServerState.DEAD]

    def scale_to(self, target: int, now: float, startup_s: float, drain_s: float) -> None:
        """Start servers up to `target`, or take the excess away: starting ones first (newest
        first), then drain ready ones (the fluid fleet's ready servers are alike)."""
        change = target - self.ready - self.starting
        for _ in range(max(change, 0)):
            self.add(now, ready_at=now + startup_s)
        excess = max(-change, 0)
        for server in sorted((s for s in self.servers if s.state is ServerState.STARTING), key=lambda s: -s.created_s):
            if excess == 0:
                break
            self._set(server, ServerState.DEAD)
            excess -= 1
        for server in self.servers:
            if excess == 0:
                break
            if server.state is ServerState.READY:
                self._set(server, ServerState.DRAINING)
                server.until_s = now + drain_s
                self.recorder.count("drained")
                excess -= 1
        self.servers = [s for s in self.servers if s.state is not ServerState.DEAD]

    def fail_one(self, rng: random.Random) -> bool:
        """A random ready server dies (True), or none was ready (False)."""
        ready = [s for s in self.servers if s.state is ServerState.READY]
        if not ready:
            return False
        self._set(rng.choice(ready), ServerState.DEAD)
        self.servers = [s for s in self.servers if s.state is not ServerState.DEAD]
        return True
