"""Scheduler: budget order and cost, chunking, admission, preemption order, no leaks."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import pytest

from engine.config import EngineConfig
from engine.request import FinishReason, RequestClass
from engine.scheduler import Scheduler, SchedulerOutput, chunk_cost, max_chunk_tokens
from engine.sequence import RequestStatus, Sequence

ConfigFactory = Callable[..., EngineConfig]
SeqFactory = Callable[..., Sequence]
BULK = RequestClass.BULK
INTERACTIVE = RequestClass.INTERACTIVE


def step_cost(out: SchedulerOutput, config: EngineConfig) -> float:
    """Cost of a planned step; call before update_after_step (starts are still current)."""
    return sum(chunk_cost(seq.num_computed_tokens, n, config.attention_cost_tokens) for seq, n in out.scheduled)


def run_step(scheduler: Scheduler) -> SchedulerOutput:
    """Plan, 'compute', and append token (last + 1) where a chunk reached the end."""
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


@pytest.mark.parametrize("start", [0, 1, 100, 5_000, 30_000])
@pytest.mark.parametrize("cost_left", [0.5, 1.0, 2.0, 10.0, 100.0, 4096.0])
@pytest.mark.parametrize("want", [1, 7, 512])
def test_max_chunk_tokens_is_the_largest_chunk_that_fits(start: int, cost_left: float, want: int) -> None:
    brute = max((n for n in range(want + 1) if chunk_cost(start, n, 256.0) <= cost_left), default=0)
    assert max_chunk_tokens(start, want, cost_left, 256.0) == brute


def test_chunk_cost_counts_attended_positions() -> None:
    assert chunk_cost(0, 1, 4.0) == 1 + 1 / 4  # the first token attends to itself
    assert chunk_cost(10, 1, 4.0) == 1 + 11 / 4
    assert chunk_cost(2, 3, 4.0) == 3 + (3 + 4 + 5) / 4


def test_decodes_go_first_and_a_prompt_gets_what_is_left(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    scheduler = Scheduler(make_config(max_num_batched_tokens=10))
    scheduler.add(make_sequence("a", [1, 2, 3], arrival=0))
    scheduler.add(make_sequence("b", [1, 2, 3], arrival=1))
    assert planned(run_step(scheduler)) == [("a", 3), ("b", 3)]
    scheduler.add(make_sequence("c", range(20), arrival=2))
    out = run_step(scheduler)
    assert planned(out) == [("a", 1), ("b", 1), ("c", 8)]
    assert out.num_context == 1
    assert planned(run_step(scheduler)) == [("a", 1), ("b", 1), ("c", 8)]
    assert planned(run_step(scheduler)) == [("a", 1), ("b", 1), ("c", 4)]


def test_interactive_is_scheduled_ahead_of_bulk(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    scheduler = Scheduler(make_config(max_num_batched_tokens=6))
    scheduler.add(make_sequence("bulk", range(5), arrival=0, request_class=BULK))
    scheduler.add(make_sequence("chat", range(5), arrival=1))
    assert planned(run_step(scheduler)) == [("chat", 5), ("bulk", 1)]
    assert planned(run_step(scheduler)) == [("chat", 1), ("bulk", 4)]
    assert planned(run_step(scheduler)) == [("chat", 1), ("bulk", 1)]


def test_chunks_shrink_with_depth_and_decodes_keep_their_pace(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    config = make_config(kv_capacity_tokens=4096, block_size=16, max_step_cost=300.0, attention_cost_tokens=64.0)
    scheduler = Scheduler(config)
    for i in range(2):
        scheduler.add(make_sequence(f"stream{i}", range(10), arrival=i, max_tokens=1000))
    run_step(scheduler)
    doc = make_sequence("doc", range(2000), arrival=2)
    scheduler.add(doc)
    chunk_sizes = []
    while doc.num_computed_tokens < 2000:
        out = scheduler.schedule()
        assert step_cost(out, config) <= config.max_step_cost
        ids = planned(out)
        assert ids[:2] == [("stream0", 1), ("stream1", 1)]  # every step, no gaps
        chunk_sizes.append(dict(ids)["doc"])
        scheduler.update_after_step(out)
        for seq, _ in out.scheduled:
            if seq.num_computed_tokens == seq.num_tokens:
                seq.append_token(0)
    assert chunk_sizes[0] > 100
    assert all(later <= earlier for earlier, later in itertools.pairwise(chunk_sizes))
    assert chunk_sizes[-2] < 15  # 2,000 positions deep a token costs ~32 units of 300
    assert sum(chunk_sizes) == 2000


def test_streams_admitted_after_a_long_prompt_still_decode_first(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    config = make_config(kv_capacity_tokens=4096, block_size=16, max_step_cost=100.0, attention_cost_tokens=64.0)
    scheduler = Scheduler(config)
    scheduler.add(make_sequence("doc", range(1000), arrival=0))
    run_step(scheduler)  # the document is admitted first, so it is the oldest running sequence
    scheduler.add(make_sequence("chat", range(2000, 2003), arrival=1, max_tokens=100))
    while scheduler.get("chat").num_computed_tokens < 3:  # type: ignore[union-attr]
        run_step(scheduler)  # the chat's prompt shares the doc's steps
    for _ in range(10):
        out = scheduler.schedule()
        assert step_cost(out, config) <= config.max_step_cost
        assert planned(out)[0] == ("chat", 1)  # the decode goes before the older reader
        assert planned(out)[1][0] == "doc"
        run_step_after(scheduler, out)


def run_step_after(scheduler: Scheduler, out: SchedulerOutput) -> None:
    scheduler.update_after_step(out)
    for seq, _ in out.scheduled:
        if seq.num_computed_tokens == seq.num_tokens:
            seq.append_token(seq.all_token_ids[-1] + 1)


def test_a_step_always_makes_progress_even_over_budget(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    scheduler = Scheduler(make_config(max_step_cost=1.0))  # no token fits: each costs > 1
    scheduler.add(make_sequence("a", range(3), arrival=0))
    scheduler.add(make_sequence("b", range(3), arrival=1))
    assert [planned(run_step(scheduler)) for _ in range(4)] == [[("a", 1)]] * 4
    a = scheduler.get("a")
    assert a is not None and a.num_generated_tokens == 2  # read one token a step, then decoded


def test_unchunked_prompts_are_scheduled_whole(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=256, enable_chunked_prefill=False, max_num_batched_tokens=8))
    scheduler.add(make_sequence("a", range(20), arrival=0))
    scheduler.add(make_sequence("b", range(100, 120), arrival=1))
    scheduler.add(make_sequence("c", range(200, 203), arrival=2))
    assert planned(run_step(scheduler)) == [("a", 20)]  # over budget: allowed as the step's only prompt
    assert planned(run_step(scheduler)) == [("a", 1), ("b", 20)]
    assert planned(run_step(scheduler)) == [("a", 1), ("b", 1), ("c", 3)]


def test_admission_waits_until_all_prompt_blocks_fit(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    scheduler = Scheduler(make_config())  # 16 blocks of 4
    first = make_sequence("first", range(40), arrival=0, max_tokens=2, request_class=BULK)
    second = make_sequence("second", range(100, 132), arrival=1, request_class=BULK)
    scheduler.add(first)
    scheduler.add(second)
    assert planned(run_step(scheduler)) == [("first", 40)]
    assert second.block_table == [] and second.status is RequestStatus.WAITING
    assert planned(run_step(scheduler)) == [("first", 1)]  # first finishes (max_tokens=2)
    assert planned(run_step(scheduler)) == [("second", 32)]
    assert second.block_table == [*range(10, 16), 9, 8]  # free blocks first, then evict cached


def fill_memory(scheduler: Scheduler, make_sequence: SeqFactory, specs: list[tuple[str, int, RequestClass]]) -> None:
    for arrival, (request_id, prompt_len, cls) in enumerate(specs):
        tokens = range(arrival * 100, arrival * 100 + prompt_len)
        scheduler.add(make_sequence(request_id, tokens, arrival=arrival, max_tokens=16, request_class=cls))
    run_step(scheduler)
    assert scheduler.block_manager.num_free_blocks == 0


def test_running_interactive_preempts_newest_bulk_first(
    make_config: ConfigFactory, make_sequence: SeqFactory, invariants: Callable[[Scheduler], None]
) -> None:
    scheduler = Scheduler(make_config())
    fill_memory(scheduler, make_sequence, [("i1", 16, INTERACTIVE), ("b1", 24, BULK), ("b2", 24, BULK)])
    out = run_step(scheduler)
    assert out.preempted_ids == ["b2"]
    assert planned(out) == [("i1", 1), ("b1", 1)]
    b2 = scheduler.get("b2")
    assert b2 is not None and b2.status is RequestStatus.PREEMPTED and b2.block_table == []
    assert b2.num_computed_tokens == 0 and b2.num_preemptions == 1
    # b2's blocks 10..15 were freed tail first; i1 then b1 took one each from the front.
    assert scheduler.get("i1").block_table == [0, 1, 2, 3, 15]  # type: ignore[union-attr]
    assert scheduler.get("b1").block_table == [4, 5, 6, 7, 8, 9, 14]  # type: ignore[union-attr]
    invariants(scheduler)


def test_interactive_preempts_newest_interactive_when_no_bulk_is_left(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    scheduler = Scheduler(make_config())
    fill_memory(scheduler, make_sequence, [("i1", 32, INTERACTIVE), ("i2", 32, INTERACTIVE)])
    out = run_step(scheduler)
    assert out.preempted_ids == ["i2"]
    assert planned(out) == [("i1", 1)]


def test_bulk_never_preempts_interactive(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    scheduler = Scheduler(make_config())
    # i1's next token still fits its last block; b1 needs a new one and only i1 holds memory.
    fill_memory(scheduler, make_sequence, [("i1", 15, INTERACTIVE), ("b1", 48, BULK)])
    out = run_step(scheduler)
    assert out.preempted_ids == ["b1"]
    assert planned(out) == [("i1", 1)]
    assert len(scheduler.get("i1").block_table) == 4  # type: ignore[union-attr]


def test_waiting_interactive_preempts_bulk_and_is_admitted_at_once(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    scheduler = Scheduler(make_config())
    fill_memory(scheduler, make_sequence, [("b1", 28, BULK), ("b2", 36, BULK)])
    # All 16 blocks are bulk's: what the engine exports as room a person may take.
    assert (scheduler.held_blocks(BULK), scheduler.held_blocks(INTERACTIVE)) == (16, 0)
    scheduler.add(make_sequence("chat", range(500, 520), arrival=9))
    out = run_step(scheduler)
    assert out.preempted_ids == ["b2"]
    assert planned(out) == [("chat", 20), ("b1", 1)]
    assert scheduler.get("b2").status is RequestStatus.PREEMPTED  # type: ignore[union-attr]
    assert (scheduler.held_blocks(BULK), scheduler.held_blocks(INTERACTIVE)) == (8, 5)


def test_bulk_is_not_admitted_while_interactive_waits_for_memory(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    scheduler = Scheduler(make_config())
    scheduler.add(make_sequence("i1", range(40), arrival=0, max_tokens=2))
    run_step(scheduler)  # i1 holds 10 of 16 blocks, and takes an 11th in the next step
    scheduler.add(make_sequence("i2", range(100, 130), arrival=1))  # needs 8: must wait for i1
    scheduler.add(make_sequence("small-bulk", range(200, 204), arrival=2, request_class=BULK))
    assert planned(run_step(scheduler)) == [("i1", 1)]
    assert planned(run_step(scheduler)) == [("i2", 30), ("small-bulk", 4)]


def test_request_that_can_never_fit_is_aborted_once(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    scheduler = Scheduler(make_config())  # 64 token slots
    too_long = make_sequence("too-long", range(10), arrival=0, max_tokens=56)
    just_fits = make_sequence("just-fits", range(10), arrival=1, max_tokens=55)
    scheduler.add(too_long)
    scheduler.add(just_fits)
    out = scheduler.schedule()
    assert [seq.request_id for seq in out.aborted] == ["too-long"]
    assert too_long.finish_reason is FinishReason.ABORTED
    assert planned(out) == [("just-fits", 10)]
    assert scheduler.schedule().aborted == []


def test_finish_frees_blocks_of_running_waiting_and_preempted(
    make_config: ConfigFactory, make_sequence: SeqFactory, invariants: Callable[[Scheduler], None]
) -> None:
    scheduler = Scheduler(make_config())
    fill_memory(scheduler, make_sequence, [("i1", 16, INTERACTIVE), ("b1", 24, BULK), ("b2", 24, BULK)])
    scheduler.add(make_sequence("late", range(3), arrival=7))
    run_step(scheduler)  # b2 preempted; late admitted
    for request_id in ("i1", "b1", "b2", "late"):
        seq = scheduler.finish(request_id, FinishReason.CANCELLED)
        assert seq is not None and seq.status is RequestStatus.FINISHED and seq.block_table == []
        invariants(scheduler)
    assert scheduler.finish("i1", FinishReason.CANCELLED) is None
    assert scheduler.block_manager.num_used_blocks == 0
    assert not scheduler.has_unfinished()
    assert scheduler.schedule().scheduled == []


def test_max_num_seqs_caps_admission(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    scheduler = Scheduler(make_config(max_num_seqs=2))
    for i in range(3):
        scheduler.add(make_sequence(f"r{i}", range(3), arrival=i))
    assert planned(run_step(scheduler)) == [("r0", 3), ("r1", 3)]
    assert (scheduler.num_running, scheduler.num_waiting) == (2, 1)


def test_preempted_sequence_recomputes_from_its_cached_blocks(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    scheduler = Scheduler(make_config())
    fill_memory(scheduler, make_sequence, [("i1", 16, INTERACTIVE), ("b1", 24, BULK), ("b2", 24, BULK)])
    run_step(scheduler)  # b2 preempted
    scheduler.finish("i1", FinishReason.CANCELLED)
    b2 = scheduler.get("b2")
    assert b2 is not None
    out = run_step(scheduler)
    # 25 known tokens; b2's first 4 blocks survived eviction, so only 9 tokens are recomputed.
    assert planned(out) == [("b1", 1), ("b2", 9)]
    assert b2.block_table[:4] == [10, 11, 12, 13]
    assert b2.num_cached_tokens == 0  # usage reports the first admission, not the recompute


@pytest.mark.parametrize("long_prefill_tokens", [None, 5])
def test_random_workload_never_leaks_or_overflows(
    make_config: ConfigFactory,
    make_sequence: SeqFactory,
    invariants: Callable[[Scheduler], None],
    long_prefill_tokens: int | None,
) -> None:
    rng = random.Random(7)
    config = make_config(
        kv_capacity_tokens=256,
        block_size=4,
        max_num_batched_tokens=32,
        max_step_cost=64.0,
        max_num_seqs=8,
        long_prefill_tokens=long_prefill_tokens,
    )
    scheduler = Scheduler(config)
    prefixes = [[rng.randrange(50) for _ in range(12)] for _ in range(3)]
    arrivals = 0
    preemptions = 0
    for _ in range(3000):
        if arrivals < 60 and rng.random() < 0.3:
            prefix = rng.choice(prefixes)[: rng.randrange(1, 13)]
            prompt = prefix + [rng.randrange(50) for _ in range(rng.randrange(40))]
            cls = rng.choice([INTERACTIVE, BULK])
            max_tokens = rng.randrange(1, 60)
            scheduler.add(make_sequence(f"r{arrivals}", prompt, arrivals, max_tokens, request_class=cls))
            arrivals += 1
        if rng.random() < 0.02 and scheduler.unfinished():
            scheduler.finish(rng.choice(scheduler.unfinished()).request_id, FinishReason.CANCELLED)
        out = scheduler.schedule()
        preemptions += len(out.preempted_ids)
        tokens = sum(n for _, n in out.scheduled)
        assert len(out.scheduled) <= config.max_num_seqs
        if len(out.scheduled) > 1 or tokens > 1:
            assert tokens <= config.max_num_batched_tokens
            assert step_cost(out, config) <= config.max_step_cost
        scheduler.update_after_step(out)
        for seq, _ in out.scheduled:
            if seq.num_computed_tokens == seq.num_tokens:
                seq.append_token(rng.randrange(50))
                if seq.num_completion_tokens >= seq.sampling.max_tokens:
                    scheduler.finish_sequence(seq, FinishReason.LENGTH)
        invariants(scheduler)
        if arrivals == 60 and not scheduler.has_unfinished():
            break
    else:
        pytest.fail("workload did not drain")
    assert scheduler.block_manager.num_used_blocks == 0
    assert scheduler.block_manager.num_reused_blocks > 0
    assert preemptions > 0  # the workload really was short of memory


def test_bulk_beside_interactive_is_capped_oldest_first(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    config = make_config(kv_capacity_tokens=256, max_bulk_seqs_beside_interactive=2)
    scheduler = Scheduler(config)
    for i in range(4):
        scheduler.add(make_sequence(f"bulk{i}", range(3), arrival=i, max_tokens=50, request_class=BULK))
    assert len(run_step(scheduler).scheduled) == 4  # no interactive work: no cap
    chat = make_sequence("chat", range(3), arrival=9, max_tokens=50)
    scheduler.add(chat)
    assert planned(run_step(scheduler)) == [("chat", 3), ("bulk0", 1), ("bulk1", 1)]
    assert planned(run_step(scheduler)) == [("chat", 1), ("bulk0", 1), ("bulk1", 1)]
    scheduler.finish_sequence(chat, FinishReason.CANCELLED)
    assert [seq.request_id for seq, _ in run_step(scheduler).scheduled] == ["bulk0", "bulk1", "bulk2", "bulk3"]


def test_no_cap_by_default(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    scheduler = Scheduler(make_config(kv_capacity_tokens=256))
    for i in range(4):
        scheduler.add(make_sequence(f"bulk{i}", range(3), arrival=i, max_tokens=50, request_class=BULK))
    scheduler.add(make_sequence("chat", range(3), arrival=9, max_tokens=50))
    assert len(run_step(scheduler).scheduled) == 5


def test_a_bulk_prompt_beside_interactive_work_is_read_in_small_chunks(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    """19 tokens from position 0 cost 19 + 190/256 = 19.7 (20 would cost 20.8); from 19 on,
    17 cost 18.9 (18 would cost 20.004)."""
    config = make_config(kv_capacity_tokens=1024, max_bulk_cost_beside_interactive=20.0)
    scheduler = Scheduler(config)
    scheduler.add(make_sequence("bulk0", range(200), arrival=0, max_tokens=8, request_class=BULK))
    scheduler.add(make_sequence("chat", range(3), arrival=1, max_tokens=8))
    assert planned(run_step(scheduler)) == [("chat", 3), ("bulk0", 19)]
    assert planned(run_step(scheduler)) == [("chat", 1), ("bulk0", 17)]
    scheduler.finish("chat", FinishReason.CANCELLED)
    assert planned(run_step(scheduler)) == [("bulk0", 164)]  # alone: the rest of the prompt at once


def test_a_long_read_yields_to_the_prompts_behind_it_then_takes_what_is_left(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    """Budget 40, cap 8: the document reads 8, the chat prompt 8 of its 12, the tiny one its 3;
    then the capped reads share the 21 left, shortest first: chat its last 4, the document 17."""
    config = make_config(kv_capacity_tokens=1024, max_num_batched_tokens=40, max_step_cost=1e9, long_prefill_tokens=8)
    scheduler = Scheduler(config)
    scheduler.add(make_sequence("doc", range(300), arrival=0, max_tokens=4))
    assert planned(run_step(scheduler)) == [("doc", 40)]  # alone: the whole budget
    scheduler.add(make_sequence("chat", range(1000, 1012), arrival=1, max_tokens=4))
    scheduler.add(make_sequence("tiny", range(2000, 2003), arrival=2, max_tokens=4))
    out = run_step(scheduler)
    assert planned(out) == [("doc", 25), ("chat", 12), ("tiny", 3)]
    assert sum(n for _, n in out.scheduled) == 40


def test_capped_reads_share_what_is_left_shortest_first(make_config: ConfigFactory, make_sequence: SeqFactory) -> None:
    config = make_config(kv_capacity_tokens=1024, max_num_batched_tokens=30, max_step_cost=1e9, long_prefill_tokens=5)
    scheduler = Scheduler(config)
    scheduler.add(make_sequence("long", range(200), arrival=0, max_tokens=4))
    scheduler.add(make_sequence("short", range(1000, 1012), arrival=1, max_tokens=4))
    # Each takes 5; of the 20 left the shorter read takes its 7, the longer the other 13.
    assert planned(run_step(scheduler)) == [("long", 18), ("short", 12)]


def test_long_reads_in_bulk_do_not_take_interactive_budget(
    make_config: ConfigFactory, make_sequence: SeqFactory
) -> None:
    """Interactive reads are topped up before bulk is planned at all."""
    config = make_config(kv_capacity_tokens=1024, max_num_batched_tokens=30, max_step_cost=1e9, long_prefill_tokens=5)
    scheduler = Scheduler(config)
    scheduler.add(make_sequence("bulk", range(200), arrival=0, max_tokens=4, request_class=BULK))
    scheduler.add(make_sequence("chat", range(1000, 1100), arrival=1, max_tokens=4))
    assert planned(run_step(scheduler)) == [("chat", 30)]


def test_long_prefill_tokens_must_be_positive() -> None:
    with pytest.raises(ValueError, match="long_prefill_tokens"):
        EngineConfig(long_prefill_tokens=0)
