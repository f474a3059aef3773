"""The exact mode's events. Each is small and hands the work to the world (`ExactFleet`) or to
the control loops (`exact_control.py`), returning the events that follow.

    InteractiveArrival ─▶ admit ─▶ route ─▶ StepEnd ─▶ StepEnd ─▶ ... (one chain per busy server)
    BatchArrival        DispatchTick (1 s)   AutoscaleTick (interval)   ServerReady
    ServerFailure       SampleTick (1 min)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from simulator import exact_control
from simulator.events import Event
from simulator.scenario import BatchPlan
from simulator.sim_server import SimServer

if TYPE_CHECKING:
    from simulator.exact_fleet import ExactFleet


class InteractiveArrival(Event["ExactFleet"]):
    """A person's request reaches the gateway; the next arrival is drawn (Poisson, by thinning)."""

    def handle(self, world: ExactFleet) -> Iterable[Event[ExactFleet]]:
        events = exact_control.arrive(world, self.time)
        following = exact_control.next_arrival(world, self.time)
        if following is not None:
            events.append(InteractiveArrival(following))
        return events


class BatchArrival(Event["ExactFleet"]):
    __slots__ = ("plan",)

    def __init__(self, time: float, plan: BatchPlan) -> None:
        super().__init__(time)
        self.plan = plan

    def handle(self, world: ExactFleet) -> Iterable[Event[ExactFleet]]:
        world.add_batch(self.plan, self.time)
        return ()


class DispatchTick(Event["ExactFleet"]):
    """The gateway retries its waiters; the dispatcher releases bulk into the room left."""

    def handle(self, world: ExactFleet) -> Iterable[Event[ExactFleet]]:
        return [*exact_control.dispatch(world, self.time), DispatchTick(self.time + world.settings.dispatch_interval_s)]


class AutoscaleTick(Event["ExactFleet"]):
    def handle(self, world: ExactFleet) -> Iterable[Event[ExactFleet]]:
        events, started = exact_control.autoscale(world, self.time)
        ready_at = self.time + world.scenario.startup_s
        return [
            *events,
            *(ServerReady(ready_at, server) for server in started),
            AutoscaleTick(self.time + world.settings.autoscaler.interval_s),
        ]


class ServerReady(Event["ExactFleet"]):
    __slots__ = ("server",)

    def __init__(self, time: float, server: SimServer) -> None:
        super().__init__(time)
        self.server = server

    def handle(self, world: ExactFleet) -> Iterable[Event[ExactFleet]]:
        return exact_control.server_ready(world, self.server, self.time)


class ServerFailure(Event["ExactFleet"]):
    def handle(self, world: ExactFleet) -> Iterable[Event[ExactFleet]]:
        events, next_at = exact_control.fail_one(world, self.time)
        return [*events, ServerFailure(next_at)] if next_at is not None else events


class SampleTick(Event["ExactFleet"]):
    def handle(self, world: ExactFleet) -> Iterable[Event[ExactFleet]]:
        exact_control.sample(world, self.time)
        return [SampleTick(self.time + world.settings.sample_interval_s)]
