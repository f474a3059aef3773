"""A simulated server against steps computed by hand: the real scheduler plans, the cost model
times, tokens come out when a sequence catches up."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from simulator.cost_model import LinearCost
from simulator.sim_request import BULK, INTERACTIVE, SimRequest
from simulator.sim_server import SimServer

CONFIG = EngineConfig(
    kv_capacity_tokens=1024,
    block_size=16,
    max_num_seqs=8,
    max_num_batched_tokens=64,
    max_step_cost=1e12,
    enable_prefix_caching=False,
)
# 10 ms a step, 1 ms a token computed, 0.1 ms per 1,000 positions attended.
COST = LinearCost(base_s=0.010, per_token_s=0.001, per_context_token_s=1e-7)


def run(server: SimServer, start: float = 0.0) -> list[tuple[str, float, float | None]]:
    tokens: list[tuple[str, float, float | None]] = []
    now = start
    while (step := server.begin_step()) is not None:
        now += step
        server.end_step(now, lambda r, t, gap: tokens.append((r.request_id, t, gap)))
    return tokens


def test_a_request_is_read_in_chunks_then_decoded_one_token_a_step() -> None:
    server = SimServer("s0", CONFIG, COST, created_s=0.0)
    request = SimRequest("a", "team", INTERACTIVE, prompt_tokens=100, reply_tokens=3, arrival_s=0.0)
    server.add(request)
    tokens = run(server)
    # Step 1 reads 64 prompt tokens (64 positions attended), step 2 the other 36.
    step1 = 0.010 + 0.064 + 64e-7
    step2 = 0.010 + 0.036 + 100e-7  # the first token is sampled at its end
    step3 = 0.010 + 0.001 + 101e-7  # decode at position 100
    step4 = 0.010 + 0.001 + 102e-7
    first = step1 + step2
    assert [t for _, t, _ in tokens] == pytest.approx([first, first + step3, first + step3 + step4])
    assert tokens[0][2] is None
    assert [gap for _, _, gap in tokens[1:]] == pytest.approx([step3, step4])
    assert request.first_token_s == pytest.approx(first)
    assert request.finished_s == pytest.approx(first + step3 + step4)
    assert request.tokens_done == 3
    assert server.is_empty and server.steps == 4


def test_interactive_goes_first_and_bulk_decodes_beside_it() -> None:
    server = SimServer("s0", CONFIG, COST, created_s=0.0)
    bulk = SimRequest("b", "team", BULK, prompt_tokens=40, reply_tokens=2, arrival_s=0.0)
    person = SimRequest("p", "team", INTERACTIVE, prompt_tokens=40, reply_tokens=2, arrival_s=0.0)
    server.add(bulk)
    server.add(person)
    tokens = run(server)
    # Step 1 reads the person's 40 prompt tokens, then 24 of the bulk prompt (budget 64): the
    # person's first token comes at its end. Step 2 decodes the person and reads the bulk
    # prompt's last 16 (its first token).
    assert tokens[0][0] == "p"
    step1 = 0.010 + 0.064 + (40 + 24) * 1e-7
    assert tokens[0][1] == pytest.approx(step1)
    order = [request_id for request_id, _, _ in tokens]
    assert order == ["p", "p", "b", "b"]
    assert person.finished_s is not None and bulk.finished_s is not None
    assert person.finished_s < bulk.finished_s


def test_a_dead_server_hands_back_its_requests_with_tokens_delivered() -> None:
    server = SimServer("s0", CONFIG, COST, created_s=0.0)
    request = SimRequest("a", "team", INTERACTIVE, prompt_tokens=10, reply_tokens=5, arrival_s=0.0)
    server.add(request)
    for _ in range(2):  # read the prompt (first token), one decode
        step = server.begin_step()
        assert step is not None
        server.end_step(step, lambda r, t, gap: None)
    orphans = server.evict_all()
    assert orphans == [request] and request.tokens_done == 2
    assert server.is_empty and server.epoch == 1
    # Resumed elsewhere: the tokens already sent are read as context, 3 more come.
    other = SimServer("s1", CONFIG, COST, created_s=0.0)
    other.add(request)
    assert len(run(other)) == 3
    assert request.tokens_done == 5
