"""Replay a recorded trace (arrival time, prompt tokens, reply tokens) through one simulated
server: what the trust test compares with the real engine stepping the same trace in simulated
time (simulator/engine_trace.py), and `bench sim-trust` with the live CPU stack.

    TraceArrival ─▶ server.add ─▶ TraceStep ─▶ TraceStep ─▶ ...   (one server, no gateway)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from engine.config import EngineConfig
from fleet_state.server_state import ServerState
from simulator.cost_model import StepCostModel
from simulator.events import Event, EventQueue
from simulator.sim_request import INTERACTIVE, SimRequest
from simulator.sim_server import SimServer


@dataclass(frozen=True, slots=True)
class TraceRequest:
    arrival_s: float
    prompt_tokens: int
    reply_tokens: int


@dataclass(slots=True)
class ReplayResult:
    """Per request of the trace, in order: TTFT and the gaps between its tokens."""

    ttft_s: list[float] = field(default_factory=list)
    gaps_s: list[list[float]] = field(default_factory=list)


class _Replay:
    def __init__(self, server: SimServer, trace: Sequence[TraceRequest]) -> None:
        self.server = server
        self.requests = [
            SimRequest(f"t{i}", "trace", INTERACTIVE, r.prompt_tokens, r.reply_tokens, r.arrival_s)
            for i, r in enumerate(trace)
        ]
        self.gaps: dict[str, list[float]] = {r.request_id: [] for r in self.requests}

    def step(self, now: float) -> list[Event[_Replay]]:
        step_s = self.server.begin_step()
        self.server.stepping = step_s is not None
        return [] if step_s is None else [_Step(now + step_s)]

    def on_token(self, request: SimRequest, now: float, gap: float | None) -> None:
        if gap is not None:
            self.gaps[request.request_id].append(gap)


class _Arrival(Event[_Replay]):
    __slots__ = ("request",)

    def __init__(self, time: float, request: SimRequest) -> None:
        super().__init__(time)
        self.request = request

    def handle(self, world: _Replay) -> Iterable[Event[_Replay]]:
        world.server.add(self.request)
        return [] if world.server.stepping else world.step(self.time)


class _Step(Event[_Replay]):
    def handle(self, world: _Replay) -> Iterable[Event[_Replay]]:
        world.server.end_step(self.time, world.on_token)
        return world.step(self.time)


def replay(trace: Sequence[TraceRequest], config: EngineConfig, cost: StepCostModel) -> ReplayResult:
    """Run the trace on one simulated server until every request has finished."""
    server = SimServer("replay", config, cost, created_s=0.0)
    server.state = ServerState.READY
    world = _Replay(server, trace)
    queue: EventQueue[_Replay] = EventQueue()
    for request in world.requests:
        queue.push(_Arrival(request.arrival_s, request))
    queue.run_until(world, float("inf"))
    result = ReplayResult()
    for request in world.requests:
        assert request.first_token_s is not None, f"{request.request_id} never started"
        result.ttft_s.append(request.first_token_s - request.arrival_s)
        result.gaps_s.append(world.gaps[request.request_id])
    return result
