"""Actuators: how a pool's target copies become servers. The autoscaler's loop decides; an
actuator only carries the number out.

    SupervisorActuator   the local supervisor (`switchyard up`): starts copies after the start
                         delay, drains the surplus (supervisor/supervisor.py)
    KubernetesActuator   the pool's Deployment's scale subresource (autoscaler/kubernetes_actuator.py);
                         a pod that goes drains in its preStop hook

`requested` is what the platform was last asked to run, where the registry cannot show it: a
Kubernetes pod registers itself only once it is ready, so copies asked for but not registered
are starting. The supervisor registers a new copy as STARTING at once: nothing to add.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Actuator(Protocol):
    """Carries out a pool's target copies."""

    @property
    def name(self) -> str: ...

    async def apply(self, pool_id: str, copies: int) -> None:
        """Run `copies` copies of the pool (starting or draining the difference)."""
        ...

    async def requested(self, pool_id: str) -> int | None:
        """The copies the platform was last asked to run (None: the registry says it all)."""
        ...


class TargetSetter(Protocol):
    """What the supervisor offers an actuator (`SupervisorThread` or `Supervisor`)."""

    def set_target(self, pool_id: str, copies: int) -> None: ...


class SupervisorActuator:
    """Sets targets on a supervisor running in this process."""

    name = "supervisor"

    def __init__(self, supervisor: TargetSetter) -> None:
        self._supervisor = supervisor

    async def apply(self, pool_id: str, copies: int) -> None:
        # SupervisorThread.set_target waits for the supervisor's own loop: not on this one.
        await asyncio.to_thread(self._supervisor.set_target, pool_id, copies)

    async def requested(self, pool_id: str) -> int | None:
        return None
