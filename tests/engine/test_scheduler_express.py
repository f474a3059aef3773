"""The scheduler's express lane (`express_max_tokens`): a short request behind long streams
runs its few steps alone, the streams are held back a bounded number of steps, and with the
lane off nothing changes (S1, docs/latency.md)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.config import EngineConfig
from engine.request import RequestClass
from engine.scheduler import Scheduler
from engine.sequence import Sequence

from .test_scheduler import planned, run_step  # the same step loop as the scheduler's own tests

ConfigFactory = Callable[..., EngineConfig]
SeqFactory = Callable[..., Sequence]


def streaming(scheduler: Scheduler, make_sequence: SeqFactory, count: int) -> None:
    """`count` long replies, admitted and decoding."""
    for i in range(count):
        scheduler.add(make_sequence(f"long{i}", range(5), arrival=i, max_tokens=500))
    run_step(scheduler)
    run_step(scheduler)


def test_a_short_request_runs_its_steps_alone_then_everyone_resumes(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=1024, express_max_tokens=4))
    streaming(scheduler, make_sequence, 3)
    scheduler.add(make_sequence("short", range(100, 106), arrival=10, max_tokens=3))
    # Admitted into the very next step, which it has to itself; then its two decodes.
    assert planned(run_step(scheduler)) == [("short", 6)]
    assert planned(run_step(scheduler)) == [("short", 1)]
    assert planned(run_step(scheduler)) == [("short", 1)]
    assert scheduler.get("short") is None  # finished: three tokens
    assert planned(run_step(scheduler)) == [("long0", 1), ("long1", 1), ("long2", 1)]
    assert scheduler.num_held_steps == 0


def test_the_streams_are_held_back_at_most_express_max_tokens_steps_in_a_row(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=1024, express_max_tokens=2))
    streaming(scheduler, make_sequence, 2)
    plans = []
    for i in range(4):  # a short request arrives every step: the lane never empties
        scheduler.add(make_sequence(f"short{i}", range(100 * i + 100, 100 * i + 103), arrival=10 + i, max_tokens=2))
        plans.append(planned(run_step(scheduler)))
    assert plans == [
        [("short0", 3)],
        [("short0", 1), ("short1", 3)],
        # Two steps held the streams back: this one plans everyone.
        [("long0", 1), ("long1", 1), ("short1", 1), ("short2", 3)],
        [("short2", 1), ("short3", 3)],
    ]


@pytest.mark.parametrize(
    ("prompt_len", "max_tokens", "request_class"),
    [
        (6, 5, RequestClass.INTERACTIVE),  # asks for more tokens than the lane takes
        (40, 2, RequestClass.INTERACTIVE),  # its prompt does not fit one step (32 tokens)
        (6, 2, RequestClass.BULK),  # bulk never goes first
    ],
)
def test_only_short_interactive_requests_take_the_lane(
    make_config: ConfigFactory,
    make_sequence: SeqFactory,
    prompt_len: int,
    max_tokens: int,
    request_class: RequestClass,
) -> None:
    config = make_config(kv_capacity_tokens=1024, express_max_tokens=4, max_num_batched_tokens=32)
    scheduler = Scheduler(config)
    streaming(scheduler, make_sequence, 2)
    other = make_sequence("other", range(prompt_len), arrival=10, max_tokens=max_tokens, request_class=request_class)
    scheduler.add(other)
    assert not scheduler.is_express(other)
    assert [seq_id for seq_id, _ in planned(run_step(scheduler))][:2] == ["long0", "long1"]


def test_a_short_request_does_not_overtake_a_waiting_one(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    # Room for the streams and one more: the long request waits, and the short one behind it.
    scheduler = Scheduler(make_config(kv_capacity_tokens=1024, express_max_tokens=4, max_num_seqs=3))
    streaming(scheduler, make_sequence, 2)
    scheduler.add(make_sequence("chat", range(4), arrival=10, max_tokens=50))
    scheduler.add(make_sequence("short", range(4), arrival=11, max_tokens=2))
    assert planned(run_step(scheduler)) == [("long0", 1), ("long1", 1), ("chat", 4)]
    assert scheduler.get("short") is not None and scheduler.num_waiting == 1


def test_off_by_default_the_short_request_joins_the_batch(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=1024))
    streaming(scheduler, make_sequence, 2)
    scheduler.add(make_sequence("short", range(100, 106), arrival=10, max_tokens=3))
    assert planned(run_step(scheduler)) == [("long0", 1), ("long1", 1), ("short", 6)]
    assert planned(run_step(scheduler)) == [("long0", 1), ("long1", 1), ("short", 1)]


def test_under_memory_pressure_the_lane_keeps_the_block_invariants(
    make_config: ConfigFactory, make_sequence: SeqFactory, invariants: Callable[[Scheduler], None]
) -> None:
    # 8 blocks of 4: two streams hold 3 each, the short one takes the last 2 and, needing a
    # third for its first decode, gives way as the newest (recompute), as without the lane.
    scheduler = Scheduler(make_config(kv_capacity_tokens=32, block_size=4, express_max_tokens=4))
    scheduler.add(make_sequence("long0", range(11), arrival=0, max_tokens=12))
    scheduler.add(make_sequence("long1", range(20, 31), arrival=1, max_tokens=12))
    run_step(scheduler)
    scheduler.add(make_sequence("short", range(100, 108), arrival=10, max_tokens=4))
    assert planned(run_step(scheduler)) == [("short", 8)]
    steps = 0
    while scheduler.has_unfinished():
        run_step(scheduler)
        invariants(scheduler)
        steps += 1
        assert steps < 200, "work stopped moving"
    assert scheduler.num_preemptions >= 1


def test_express_max_tokens_must_be_positive() -> None:
    with pytest.raises(ValueError, match="express_max_tokens"):
        EngineConfig(express_max_tokens=0)
