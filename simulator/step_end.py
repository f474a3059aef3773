"""The event at the heart of the exact mode: one server's engine step has finished."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from simulator.events import Event
from simulator.sim_server import SimServer

if TYPE_CHECKING:
    from simulator.exact_fleet import ExactFleet


class StepEnd(Event["ExactFleet"]):
    """A server's engine step finished: tokens go out, the next step starts."""

    __slots__ = ("epoch", "server")

    def __init__(self, time: float, server: SimServer) -> None:
        super().__init__(time)
        self.server = server
        self.epoch = server.epoch

    def handle(self, world: ExactFleet) -> Iterable[Event[ExactFleet]]:
        if self.server.epoch != self.epoch:
            return ()  # the server died mid-step
        return world.step_end(self.server, self.time)
