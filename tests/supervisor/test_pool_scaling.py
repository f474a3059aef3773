"""Which copies a supervisor launches or drains to reach a pool's target."""

from __future__ import annotations

import pytest

from fleet_state.server_state import ServerState
from supervisor.pool_scaling import CopyView, ScaleSteps, scale_steps

READY, STARTING, DRAINING, DEAD = ServerState.READY, ServerState.STARTING, ServerState.DRAINING, ServerState.DEAD


def view(copy: int, state: ServerState, started_at: float, running: bool = True) -> CopyView:
    return CopyView(f"p-{copy}", copy, state, started_at, running)


def test_at_target_nothing_happens() -> None:
    assert scale_steps([view(0, READY, 1.0), view(1, STARTING, 2.0)], 2, 3) == ScaleSteps()
    assert scale_steps([view(0, READY, 1.0)], 1, 1).empty


def test_more_copies_take_the_lowest_free_indices() -> None:
    assert scale_steps([view(0, READY, 1.0)], 3, 3) == ScaleSteps(launch=(1, 2))
    assert scale_steps([view(1, READY, 1.0)], 2, 3) == ScaleSteps(launch=(0,))


def test_a_draining_copy_holds_its_index_and_does_not_count() -> None:
    copies = [view(0, READY, 1.0), view(1, DRAINING, 2.0)]
    assert scale_steps(copies, 2, 3) == ScaleSteps(launch=(2,))
    # Every index taken: the launch waits for the drain to finish.
    assert scale_steps([*copies, view(2, DRAINING, 3.0)], 3, 3) == ScaleSteps()


def test_fewer_copies_drain_pending_then_starting_then_newest_ready() -> None:
    copies = [
        view(0, READY, 1.0),
        view(1, READY, 5.0),
        view(2, READY, 3.0),
        view(3, STARTING, 6.0),
        view(4, STARTING, 7.0, running=False),  # pending its start
        view(5, DRAINING, 8.0),
    ]
    assert scale_steps(copies, 4, 6).drain == ("p-4",)
    assert scale_steps(copies, 2, 6).drain == ("p-4", "p-3", "p-1")
    assert scale_steps(copies, 0, 6).drain == ("p-4", "p-3", "p-1", "p-2", "p-0")


def test_a_dead_copy_goes_before_a_live_one() -> None:
    copies = [view(0, READY, 1.0), view(1, DEAD, 0.5, running=False)]
    assert scale_steps(copies, 1, 2).drain == ("p-1",)


@pytest.mark.parametrize("target", [-1, 4])
def test_a_target_beyond_the_limit_is_refused(target: int) -> None:
    with pytest.raises(ValueError, match=r"outside 0\.\.3"):
        scale_steps([], target, 3)
