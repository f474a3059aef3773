"""Scheduler and the four request classes: who is served first, who may take whose KV, and
the TTFT-deadline order within a class (engine/scheduler.py's docstring)."""

from __future__ import annotations

from collections.abc import Callable

from engine.config import EngineConfig
from engine.request import EngineRequest, FinishReason, RequestClass, SamplingParams
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import RequestStatus, Sequence

ConfigFactory = Callable[..., EngineConfig]
PRIORITY, INTERACTIVE, FLEX, BULK = RequestClass  # highest first


def sequence(
    request_id: str,
    prompt_len: int,
    arrival: int,
    request_class: RequestClass = INTERACTIVE,
    *,
    max_tokens: int = 16,
    slo_ttft_ms: int | None = None,
    arrival_s: float = 0.0,
) -> Sequence:
    tokens = tuple(range(arrival * 100, arrival * 100 + prompt_len))
    request = EngineRequest(
        request_id, tokens, SamplingParams(max_tokens=max_tokens), request_class, slo_ttft_ms=slo_ttft_ms
    )
    return Sequence.from_request(request, arrival, arrival_s=arrival_s)


def run_step(scheduler: Scheduler) -> SchedulerOutput:
    """Plan, 'compute', and append a token where a chunk reached the end."""
    out = scheduler.schedule()
    scheduler.update_after_step(out)
    for seq, _ in out.scheduled:
        if seq.num_computed_tokens == seq.num_tokens:
            seq.append_token(seq.all_token_ids[-1] + 1)
            if seq.num_completion_tokens >= seq.sampling.max_tokens:
                scheduler.finish_sequence(seq, FinishReason.LENGTH)
    return out


def planned(out: SchedulerOutput) -> list[tuple[str, int]]:
    return [(seq.request_id, n) for seq, n in out.scheduled]


def fill(scheduler: Scheduler, specs: list[tuple[str, int, RequestClass]], free: int = 0) -> None:
    """Admit and read these prompts in one step; `free` of the default config's 16 blocks are left."""
    for arrival, (request_id, prompt_len, cls) in enumerate(specs):
        scheduler.add(sequence(request_id, prompt_len, arrival, cls))
    run_step(scheduler)
    assert scheduler.block_manager.num_free_blocks == free


def status(scheduler: Scheduler, request_id: str) -> RequestStatus:
    seq = scheduler.get(request_id)
    assert seq is not None
    return seq.status


# --- budget order ----------------------------------------------------------------------------


def test_a_step_serves_the_classes_highest_first(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=256, max_num_batched_tokens=64))
    for arrival, cls in enumerate((BULK, FLEX, INTERACTIVE, PRIORITY)):
        scheduler.add(sequence(cls.value, 4, arrival, cls))
    assert planned(run_step(scheduler)) == [("priority", 4), ("interactive", 4), ("flex", 4), ("bulk", 4)]
    assert planned(run_step(scheduler)) == [("priority", 1), ("interactive", 1), ("flex", 1), ("bulk", 1)]


def test_a_short_budget_goes_to_the_higher_classes(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=256, max_num_batched_tokens=10))
    scheduler.add(sequence("f", 6, 0, FLEX))
    scheduler.add(sequence("p", 6, 1, PRIORITY))
    assert planned(run_step(scheduler)) == [("p", 6), ("f", 4)]


def test_the_bulk_cap_applies_beside_every_interactive_shaped_class(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=256, max_bulk_seqs_beside_interactive=1))
    scheduler.add(sequence("f", 4, 0, FLEX))
    for i in range(3):
        scheduler.add(sequence(f"b{i}", 4, 1 + i, BULK))
    assert planned(run_step(scheduler)) == [("f", 4), ("b0", 4)]


# --- preemption follows PREEMPTS -------------------------------------------------------------


def test_a_waiting_priority_request_takes_flexs_kv_and_never_interactives(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config())
    fill(scheduler, [("i1", 27, INTERACTIVE), ("f1", 35, FLEX)])  # 7 + 9 blocks
    scheduler.add(sequence("p", 20, 9, PRIORITY))  # needs 5
    out = run_step(scheduler)
    assert out.preempted_ids == ["f1"]
    assert planned(out) == [("p", 20), ("i1", 1)]  # f1 cannot come back: bulk's is all it may take
    assert status(scheduler, "f1") is RequestStatus.PREEMPTED
    assert (scheduler.held_blocks(PRIORITY), scheduler.held_blocks(FLEX)) == (5, 0)


def test_priority_never_preempts_interactive_and_the_room_that_frees_is_its_own(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config())
    fill(scheduler, [("i1", 27, INTERACTIVE), ("i2", 31, INTERACTIVE)], free=1)  # 7 + 8 blocks
    scheduler.add(sequence("p", 20, 9, PRIORITY, max_tokens=2))  # needs 5: waits
    scheduler.add(sequence("i3", 3, 10, INTERACTIVE))  # would fit the free block, but p waits
    scheduler.add(sequence("f", 3, 11, FLEX))
    out = run_step(scheduler)
    assert out.preempted_ids == []
    assert planned(out) == [("i1", 1), ("i2", 1)]
    for request_id in ("p", "i3", "f"):
        assert status(scheduler, request_id) is RequestStatus.WAITING
    scheduler.finish("i1", FinishReason.STOP)  # 7 blocks free: p first, then the rest
    assert planned(run_step(scheduler)) == [("p", 20), ("i2", 1), ("i3", 3), ("f", 3)]


def test_flex_is_preempted_before_interactive_when_a_running_priority_needs_a_block(
    make_config: ConfigFactory,
) -> None:
    scheduler = Scheduler(make_config())
    # p's next token starts an 8th block; i1's and f1's still fit theirs.
    fill(scheduler, [("p", 28, PRIORITY), ("i1", 19, INTERACTIVE), ("f1", 15, FLEX)])
    out = run_step(scheduler)
    assert out.preempted_ids == ["f1"]
    assert planned(out) == [("p", 1), ("i1", 1)]
    assert status(scheduler, "i1") is RequestStatus.RUNNING


def test_a_running_interactive_request_takes_flexs_block_before_a_newer_interactive_ones(
    make_config: ConfigFactory,
) -> None:
    scheduler = Scheduler(make_config())
    fill(scheduler, [("i1", 28, INTERACTIVE), ("i2", 19, INTERACTIVE), ("f1", 15, FLEX)])
    out = run_step(scheduler)
    assert out.preempted_ids == ["f1"]
    assert planned(out) == [("i1", 1), ("i2", 1)]


def test_flex_takes_bulks_kv_but_never_interactives(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config())
    fill(scheduler, [("i1", 35, INTERACTIVE), ("f1", 28, FLEX)])  # f1's next token needs a block
    out = run_step(scheduler)
    assert out.preempted_ids == ["f1"]  # nobody it may take from: it gives way itself
    assert planned(out) == [("i1", 1)]

    scheduler = Scheduler(make_config())
    fill(scheduler, [("b1", 35, BULK), ("f1", 28, FLEX)])
    out = run_step(scheduler)
    assert out.preempted_ids == ["b1"]
    assert planned(out) == [("f1", 1)]


def test_a_waiting_flex_request_takes_only_bulks_kv(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config())
    fill(scheduler, [("i1", 27, INTERACTIVE), ("b1", 35, BULK)])
    scheduler.add(sequence("f", 20, 9, FLEX))
    out = run_step(scheduler)
    assert out.preempted_ids == ["b1"]
    assert planned(out) == [("i1", 1), ("f", 20)]

    scheduler = Scheduler(make_config())
    fill(scheduler, [("i1", 27, INTERACTIVE), ("p1", 35, PRIORITY)])
    scheduler.add(sequence("f", 20, 9, FLEX))
    out = run_step(scheduler)
    assert out.preempted_ids == []
    assert planned(out) == [("p1", 1), ("i1", 1)]


def test_victims_are_the_lowest_class_first_then_the_newest(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config())
    fill(scheduler, [("f1", 15, FLEX), ("b1", 15, BULK), ("f2", 15, FLEX), ("b2", 15, BULK)])  # 4 blocks each
    scheduler.add(sequence("p", 44, 9, PRIORITY, max_tokens=1))  # needs 11: three of them go
    out = run_step(scheduler)
    assert out.preempted_ids == ["b2", "b1", "f2"]
    assert planned(out) == [("p", 44), ("f1", 1)]


def test_bulk_is_held_while_flex_waits_for_memory(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config())
    fill(scheduler, [("i1", 27, INTERACTIVE), ("i2", 31, INTERACTIVE)], free=1)
    scheduler.add(sequence("f", 20, 9, FLEX))
    scheduler.add(sequence("b", 3, 10, BULK))
    out = run_step(scheduler)
    assert planned(out) == [("i1", 1), ("i2", 1)]
    assert status(scheduler, "b") is RequestStatus.WAITING


# --- TTFT deadlines within a class -------------------------------------------------------------


def test_waiting_requests_of_a_class_go_earliest_deadline_first(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=256, max_num_batched_tokens=64))
    scheduler.add(sequence("none-1", 4, 0))
    scheduler.add(sequence("slow", 4, 1, slo_ttft_ms=5_000))
    scheduler.add(sequence("none-2", 4, 2))
    scheduler.add(sequence("fast", 4, 3, slo_ttft_ms=200))
    # Arrived later with a shorter target: 0.9 + 0.1 s is still before 0.0 + 5 s.
    scheduler.add(sequence("late-fast", 4, 4, slo_ttft_ms=100, arrival_s=0.9))
    scheduler.add(sequence("same-deadline", 4, 5, slo_ttft_ms=200))
    assert [request_id for request_id, _ in planned(run_step(scheduler))] == [
        "fast",
        "same-deadline",  # ties go in arrival order
        "late-fast",
        "slow",
        "none-1",
        "none-2",
    ]


def test_a_deadline_orders_only_within_its_class(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=256, max_num_batched_tokens=64))
    scheduler.add(sequence("bulk-urgent", 4, 0, BULK, slo_ttft_ms=1))
    scheduler.add(sequence("flex-urgent", 4, 1, FLEX, slo_ttft_ms=1))
    scheduler.add(sequence("interactive", 4, 2))
    assert [r for r, _ in planned(run_step(scheduler))] == ["interactive", "flex-urgent", "bulk-urgent"]


def test_the_deadline_decides_who_is_admitted_when_seats_are_short(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=256, max_num_seqs=1))
    scheduler.add(sequence("first", 4, 0, max_tokens=1))
    scheduler.add(sequence("urgent", 4, 1, max_tokens=1, slo_ttft_ms=50))
    assert planned(run_step(scheduler)) == [("urgent", 4)]
    assert planned(run_step(scheduler)) == [("first", 4)]


def test_a_preempted_sequence_goes_back_ahead_of_deadlines(make_config: ConfigFactory) -> None:
    """It has started (a reply may be streaming): it recomputes before new work of its class."""
    scheduler = Scheduler(make_config())
    fill(scheduler, [("i1", 27, INTERACTIVE), ("f1", 35, FLEX)])
    scheduler.add(sequence("p", 20, 9, PRIORITY, max_tokens=1))  # preempts f1, then ends
    scheduler.add(sequence("f-urgent", 3, 10, FLEX, slo_ttft_ms=1))
    assert run_step(scheduler).preempted_ids == ["f1"]
    scheduler.finish("i1", FinishReason.STOP)
    # Room for both: f1 first though f-urgent's deadline is the earliest.
    assert [r for r, _ in planned(run_step(scheduler))] == ["f1", "f-urgent"]


# --- the express lane ----------------------------------------------------------------------------


def test_short_requests_of_every_interactive_shaped_class_take_the_express_lane_in_class_order(
    make_config: ConfigFactory,
) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=1024, express_max_tokens=4))
    scheduler.add(sequence("long", 5, 0, max_tokens=500))
    run_step(scheduler)
    scheduler.add(sequence("f", 3, 1, FLEX, max_tokens=2))
    scheduler.add(sequence("b", 3, 2, BULK, max_tokens=2))  # bulk never goes first
    scheduler.add(sequence("p", 3, 3, PRIORITY, max_tokens=2))
    assert planned(run_step(scheduler)) == [("p", 3), ("f", 3)]
    assert planned(run_step(scheduler)) == [("p", 1), ("f", 1)]
    assert planned(run_step(scheduler)) == [("long", 1), ("b", 3)]


def test_an_express_priority_request_may_take_flexs_kv(make_config: ConfigFactory) -> None:
    scheduler = Scheduler(make_config(express_max_tokens=4))
    fill(scheduler, [("i1", 27, INTERACTIVE), ("f1", 35, FLEX)])
    scheduler.add(sequence("f-short", 3, 8, FLEX, max_tokens=2))
    scheduler.add(sequence("p-short", 3, 9, PRIORITY, max_tokens=2))
    out = run_step(scheduler)
    assert out.preempted_ids == ["f1"]
    # f1 is back at the front of flex's queue, and no express request: f-short waits behind it.
    assert planned(out) == [("p-short", 3)]
    assert status(scheduler, "f-short") is RequestStatus.WAITING
