"""What a supervisor must do to bring one pool to its target copies: which copy indices to
launch, which servers to drain. Plain data in, plain data out; the supervisor does the I/O.

    serving = copies not draining (pending, starting, ready, dead awaiting relaunch)

    serving < target ─▶ launch the lowest free copy indices below copies_limit
                        (a draining copy still holds its index, and so its ports)
    serving > target ─▶ drain the surplus, cheapest first:
                        not running (pending start, dead) ─▶ starting ─▶ ready, newest first

Draining the newest ready copy first keeps the longest-running servers, whose prefix caches
are warm; a copy that has not started yet costs nothing to drop, so it goes before any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleet_state.server_state import ServerState


@dataclass(frozen=True, slots=True)
class CopyView:
    """What the scaling decision needs to know of one supervised copy."""

    server_id: str
    copy: int  # its index: ports are the pool's + 10·copy
    state: ServerState
    started_at: float  # when it was launched (or asked for, while pending)
    running: bool  # a process exists (False: waiting for its first start, or dead)


@dataclass(frozen=True, slots=True)
class ScaleSteps:
    launch: tuple[int, ...] = ()  # copy indices to start
    drain: tuple[str, ...] = ()  # server ids to drain, in this order

    @property
    def empty(self) -> bool:
        return not self.launch and not self.drain


def scale_steps(copies: Sequence[CopyView], target: int, copies_limit: int) -> ScaleSteps:
    """The launches or drains that move `copies` (one pool's) towards `target` copies.

    Launches are limited by the free indices below `copies_limit`: when draining copies still
    hold them, the rest come on a later call, once those have gone."""
    if not 0 <= target <= copies_limit:
        raise ValueError(f"target {target} is outside 0..{copies_limit}")
    serving = [c for c in copies if c.state is not ServerState.DRAINING]
    if len(serving) < target:
        used = {c.copy for c in copies}
        free = [k for k in range(copies_limit) if k not in used]
        return ScaleSteps(launch=tuple(free[: target - len(serving)]))
    if len(serving) > target:
        surplus = sorted(serving, key=_drain_order)[: len(serving) - target]
        return ScaleSteps(drain=tuple(c.server_id for c in surplus))
    return ScaleSteps()


def _drain_order(copy: CopyView) -> tuple[int, float, int]:
    rank = 0 if not copy.running else (1 if copy.state is ServerState.STARTING else 2)
    return rank, -copy.started_at, -copy.copy
