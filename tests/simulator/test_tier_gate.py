"""The tiers on one simulated server (`TierGate` over the engine's two classes): priority goes
before interactive waiting ahead of it, flex waits while a higher tier does and gives its KV to
one that cannot get blocks otherwise, flex outranks bulk, and priority never takes KV from
interactive.

Eight blocks of 16 tokens; every request reads 40 prompt tokens and writes 4, so it holds 3
blocks from admission to its end (8 tokens at most): two run at once, a third waits for blocks."""

from __future__ import annotations

from contracts.service_tier import RequestClass
from engine.config import EngineConfig
from simulator.cost_model import LinearCost
from simulator.sim_request import BULK, FLEX, INTERACTIVE, PRIORITY, SimRequest
from simulator.sim_server import SimServer, StepResult
from simulator.tier_gate import Withdrawn

CONFIG = EngineConfig(
    kv_capacity_tokens=128,
    block_size=16,
    max_num_seqs=8,
    max_num_batched_tokens=256,
    max_step_cost=1e12,
    enable_prefix_caching=False,
)
COST = LinearCost(base_s=0.010, per_token_s=0.001, per_context_token_s=0.0)


def request(request_id: str, request_class: RequestClass, reply_tokens: int = 4) -> SimRequest:
    return SimRequest(request_id, "team", request_class, prompt_tokens=40, reply_tokens=reply_tokens, arrival_s=0.0)


class Clock:
    """Steps one server, keeping the time and every step's result."""

    def __init__(self) -> None:
        self.server = SimServer("s0", CONFIG, COST, created_s=0.0)
        self.now = 0.0
        self.results: list[StepResult] = []

    def step(self) -> bool:
        duration = self.server.begin_step()
        if duration is None:
            return False
        self.now += duration
        self.results.append(self.server.end_step(self.now, lambda r, t, gap: None))
        return True

    def run(self) -> None:
        while self.step():
            pass


def first_tokens(*requests: SimRequest) -> list[float]:
    times = [r.first_token_s for r in requests]
    assert all(t is not None for t in times)
    return [t for t in times if t is not None]


def test_priority_is_admitted_before_interactive_that_waited_ahead_of_it() -> None:
    clock = Clock()
    i1, i2, i3, p = (
        request("i1", INTERACTIVE),
        request("i2", INTERACTIVE, 8),
        request("i3", INTERACTIVE),
        request("p", PRIORITY),
    )
    for r in (i1, i2, i3):
        clock.server.add(r)
    clock.step()  # i1 and i2 admitted; i3 waits for blocks
    clock.server.add(p)  # i1's blocks, freed first, go to p
    assert clock.server.gate.waiting(INTERACTIVE) == 1 and clock.server.gate.waiting(PRIORITY) == 1
    clock.run()
    (p_first, i3_first) = first_tokens(p, i3)
    assert p_first < i3_first
    assert [r.tokens_done for r in (i1, i2, i3, p)] == [4, 8, 4, 4]


def test_flex_waits_behind_a_higher_tier_and_is_handed_over_after_it() -> None:
    clock = Clock()
    i1, i2, i3, f = (
        request("i1", INTERACTIVE),
        request("i2", INTERACTIVE, 8),
        request("i3", INTERACTIVE),
        request("f", FLEX),
    )
    for r in (i1, i2, i3):
        clock.server.add(r)
    clock.step()
    clock.server.add(f)
    assert clock.server.gate.num_held == 1  # not in the engine while i3 waits
    assert clock.server.scheduler.num_waiting == 1
    clock.run()
    (i3_first, f_first) = first_tokens(i3, f)
    assert i3_first < f_first
    assert f.tokens_done == 4


def test_a_higher_tier_takes_flex_s_kv_newest_first_and_flex_resumes_token_for_token() -> None:
    clock = Clock()
    f1, f2, i = request("f1", FLEX), request("f2", FLEX), request("i", INTERACTIVE)
    clock.server.add(f1)
    clock.server.add(f2)
    clock.step()  # both read their prompts: their first tokens
    assert f1.tokens_done == f2.tokens_done == 1
    clock.server.add(i)  # 3 blocks needed, 2 free, no bulk: the newest flex gives up its 3
    clock.step()
    assert clock.results[-1].withdrawn.flex == 1
    assert i.first_token_s == clock.now  # admitted and read in that very step
    assert f1.tokens_done == 2 and f2.tokens_done == 1  # f2 holds no blocks now
    clock.run()
    assert f2.tokens_done == 4 and f2.finished_s is not None
    assert i.finished_s is not None and i.finished_s < f2.finished_s
    assert sum(r.withdrawn.flex for r in clock.results) == 1
    assert clock.server.scheduler.block_manager.num_free_blocks == 8


def test_flex_outranks_bulk() -> None:
    clock = Clock()
    b1, b2, f = request("b1", BULK), request("b2", BULK), request("f", FLEX)
    clock.server.add(b1)
    clock.server.add(b2)
    clock.step()
    clock.server.add(f)  # the gate frees the newest bulk's blocks for it
    clock.step()
    assert clock.results[-1].withdrawn.bulk == 1
    assert f.first_token_s == clock.now
    clock.run()
    assert f.finished_s is not None and b2.finished_s is not None and f.finished_s < b2.finished_s
    assert b2.tokens_done == 4


def test_a_higher_tier_on_borrowed_room_stays_above_flex() -> None:
    clock = Clock()
    p = request("p", PRIORITY)
    p.borrowed = True  # beyond its team's share: the engine's bulk class
    b, f = request("b", BULK, 8), request("f", FLEX)
    clock.server.add(p)
    clock.server.add(b)
    clock.step()
    clock.server.add(f)  # 2 blocks free: flex may take bulk's, never the borrowed priority's
    clock.run()
    assert p.tokens_done == 4 and p.finished_s is not None
    p_seq_preempted = clock.server.scheduler.num_preemptions
    assert p_seq_preempted == 0
    assert sum(r.withdrawn.bulk for r in clock.results) == 1  # b, not p
    assert f.first_token_s is not None and f.first_token_s < (b.finished_s or 0.0)


def test_flex_waits_behind_a_higher_tier_on_borrowed_room_and_gives_it_its_kv() -> None:
    clock = Clock()
    f1, f2 = request("f1", FLEX, 8), request("f2", FLEX)
    clock.server.add(f1)
    clock.server.add(f2)
    clock.step()
    p = request("p", PRIORITY)
    p.borrowed = True
    clock.server.add(p)  # 3 blocks needed, 2 free: the newest flex gives up its 3
    clock.step()
    assert clock.results[-1].withdrawn.flex == 1
    assert p.first_token_s == clock.now
    clock.run()
    assert [r.tokens_done for r in (f1, f2, p)] == [8, 4, 4]


def test_priority_never_takes_interactive_s_kv() -> None:
    clock = Clock()
    i1, i2, p = request("i1", INTERACTIVE), request("i2", INTERACTIVE), request("p", PRIORITY)
    clock.server.add(i1)
    clock.server.add(i2)
    clock.step()
    clock.server.add(p)  # no flex and no bulk to take from: it waits
    clock.run()
    assert clock.server.scheduler.num_preemptions == 0
    assert sum(r.withdrawn.flex + r.withdrawn.bulk for r in clock.results) == 0
    (i1_end, p_first) = (i1.finished_s, p.first_token_s)
    assert i1_end is not None and p_first is not None and p_first > i1_end


def test_owners_take_flex_s_room_first_then_borrowed_work_s() -> None:
    clock = Clock()
    borrowed, f = request("b", INTERACTIVE, 8), request("f", FLEX, 8)
    borrowed.borrowed = True  # the default tier beyond its team's share: ranks above flex
    clock.server.add(borrowed)
    clock.server.add(f)  # held while the borrowed request waits above it
    clock.step()
    assert f.first_token_s is None
    clock.step()  # handed over, then admitted
    assert f.first_token_s == clock.now
    owner = request("o", INTERACTIVE)
    clock.server.add(owner)
    clock.step()
    assert clock.results[-1].withdrawn == Withdrawn(flex=1)
    second = request("o2", PRIORITY)
    clock.server.add(second)  # flex is out already: the borrowed room goes back to its owners
    clock.step()
    assert clock.results[-1].withdrawn == Withdrawn(borrowed=1)
    assert owner.first_token_s is not None and second.first_token_s == clock.now
    clock.run()
    assert [r.tokens_done for r in (borrowed, f, owner, second)] == [8, 8, 4, 4]
    assert borrowed.finished_s is not None and f.finished_s is not None and borrowed.finished_s < f.finished_s
