"""LLMEngine and the four request classes, end to end: a priority request takes a running flex
reply's KV in a full cache and both replies stay token for token what each would be alone (the
real numpy Llama, greedy); the TTFT deadline on the engine's clock; `slo_ttft_ms` validation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from build_engines.checkpoint import llama_config_dict, write_random_checkpoint
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.request import MAX_SLO_TTFT_MS, EngineRequest, RequestClass, RequestOutput
from engine.scheduler import Scheduler

PRIORITY, INTERACTIVE, FLEX = RequestClass.PRIORITY, RequestClass.INTERACTIVE, RequestClass.FLEX
Invariants = Callable[[Scheduler], None]
# 16 blocks of 4 tokens: the replies below fill it.
TIGHT = EngineConfig(kv_capacity_tokens=64, block_size=4, max_num_batched_tokens=64)
ROOMY = EngineConfig(kv_capacity_tokens=1024, block_size=4, enable_prefix_caching=False)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-llama")
    config = llama_config_dict(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    write_random_checkpoint(config, seed=5, out_dir=out)
    return out


def prompt(seed: int, length: int) -> list[int]:
    return [(seed * 31 + i * 7) % 90 + 3 for i in range(length)]


def alone(checkpoint: Path, request: EngineRequest) -> list[int]:
    """The reply `request` gets in an engine of its own with room to spare."""
    engine = LLMEngine.from_pretrained(checkpoint, ROOMY)
    engine.add_request(request)
    tokens: list[int] = []
    while engine.has_unfinished():
        tokens += [t for output in engine.step() for t in output.new_token_ids]
    return tokens


def step(engine: LLMEngine, outputs: dict[str, list[RequestOutput]], invariants: Invariants) -> set[str]:
    got = engine.step()
    invariants(engine.scheduler)
    for output in got:
        outputs.setdefault(output.request_id, []).append(output)
    return {output.request_id for output in got if output.new_token_ids}


def reply(outputs: list[RequestOutput]) -> list[int]:
    return [token for output in outputs for token in output.new_token_ids]


def test_a_priority_request_takes_a_running_flex_replys_kv_and_both_replies_stay_exact(
    checkpoint: Path, make_request: Any, invariants: Invariants
) -> None:
    flex = make_request("flex", prompt(1, 28), 20, FLEX, ignore_eos=True)  # up to 12 blocks
    person = make_request("person", prompt(2, 16), 12, INTERACTIVE, ignore_eos=True)  # up to 7
    urgent = make_request("urgent", prompt(3, 16), 8, PRIORITY, ignore_eos=True)  # up to 6
    engine = LLMEngine.from_pretrained(checkpoint, TIGHT)
    outputs: dict[str, list[RequestOutput]] = {}
    engine.add_request(flex)
    engine.add_request(person)
    for _ in range(4):
        assert step(engine, outputs, invariants) == {"flex", "person"}
    # flex holds 8 blocks and the person 5: the priority request's 4 are not free.
    assert engine.stats().class_kv_metrics() == {"priority": 0, "interactive": 5, "flex": 8, "bulk": 0}
    assert engine.stats().free_blocks == 3

    engine.add_request(urgent)
    assert step(engine, outputs, invariants) == {"urgent", "person"}  # its first token at once
    flex_seq, person_seq = engine.scheduler.get("flex"), engine.scheduler.get("person")
    assert flex_seq is not None and flex_seq.num_preemptions == 1
    assert person_seq is not None and person_seq.num_preemptions == 0
    while engine.has_unfinished():
        step(engine, outputs, invariants)

    assert engine.scheduler.num_preemptions == 1  # flex gave way once; nobody else ever did
    # ... and the engine's gauge says so, by the class that gave way.
    assert engine.stats().class_preemption_metrics() == {"priority": 0, "interactive": 0, "flex": 1, "bulk": 0}
    for request in (flex, person, urgent):
        assert reply(outputs[request.request_id]) == alone(checkpoint, request), request.request_id
    assert engine.stats().used_blocks == 0


def test_a_priority_request_waits_for_interactive_replies_kv_rather_than_take_it(
    checkpoint: Path, make_request: Any, invariants: Invariants
) -> None:
    people = [make_request(f"person{i}", prompt(10 + i, 24), 6, INTERACTIVE, ignore_eos=True) for i in range(2)]
    urgent = make_request("urgent", prompt(3, 20), 4, PRIORITY, ignore_eos=True)
    engine = LLMEngine.from_pretrained(checkpoint, TIGHT)
    outputs: dict[str, list[RequestOutput]] = {}
    for request in people:
        engine.add_request(request)
    step(engine, outputs, invariants)
    engine.add_request(urgent)  # 5 blocks; the people hold 12 of 16, then 14
    while not all(outputs[request.request_id][-1].finished for request in people):
        assert step(engine, outputs, invariants) == {"person0", "person1"}  # never held up
    assert "urgent" not in outputs
    assert step(engine, outputs, invariants) == {"urgent"}  # the blocks they freed
    while engine.has_unfinished():
        step(engine, outputs, invariants)
    assert engine.scheduler.num_preemptions == 0
    for request in (*people, urgent):
        assert reply(outputs[request.request_id]) == alone(checkpoint, request), request.request_id


def test_waiting_requests_start_in_ttft_deadline_order_on_the_engines_clock(
    make_config: Any, make_model: Any, make_request: Any
) -> None:
    now = [100.0]
    config = make_config(kv_capacity_tokens=256, max_num_seqs=1)
    engine = LLMEngine(config, make_model(config.num_blocks, config.block_size), clock=lambda: now[0])
    engine.add_request(make_request("no-target", [1, 2], max_tokens=1))
    engine.add_request(make_request("relaxed", [1, 2], max_tokens=1, slo_ttft_ms=2_000))  # due at 102.0
    now[0] = 101.0
    engine.add_request(make_request("tight", [1, 2], max_tokens=1, slo_ttft_ms=500))  # due at 101.5
    # One seat: each step admits the front of the queue, which finishes in it.
    finished = [output.request_id for _ in range(3) for output in engine.step() if output.finished]
    assert finished == ["tight", "relaxed", "no-target"]


@pytest.mark.parametrize("slo_ttft_ms", [0, -5, MAX_SLO_TTFT_MS + 1])
def test_a_ttft_target_out_of_range_is_refused(
    slo_ttft_ms: int, make_config: Any, make_model: Any, make_request: Any
) -> None:
    config = make_config()
    engine = LLMEngine(config, make_model(config.num_blocks, config.block_size))
    with pytest.raises(ValueError, match="slo_ttft_ms must be in"):
        engine.add_request(make_request("r", [1, 2, 3], request_class=FLEX, slo_ttft_ms=slo_ttft_ms))


@pytest.mark.parametrize("slo_ttft_ms", [None, 1, MAX_SLO_TTFT_MS])
def test_a_ttft_target_in_range_is_served(
    slo_ttft_ms: int | None, make_config: Any, make_model: Any, make_request: Any
) -> None:
    config = make_config()
    engine = LLMEngine(config, make_model(config.num_blocks, config.block_size))
    engine.add_request(make_request("r", [1, 2, 3], request_class=FLEX, slo_ttft_ms=slo_ttft_ms))
    assert engine.step()[0].new_token_ids == (4,)
