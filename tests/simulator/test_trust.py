"""Trust: the simulator schedules a trace exactly as the real engine does.

The same trace (arrival time, prompt tokens, reply tokens) runs through the whole `LLMEngine`
(the numpy Llama with random weights, as tests/engine/test_model.py builds it, computing every
chunk and sampling every token) on a virtual clock (`simulator.engine_trace`), and through
`simulator.trace_replay.replay` (one `SimServer`, no model). Both clocks advance by the same
`LinearCost` for what each step computes, so every first token and every gap between tokens
must agree to the last bit: a simulator that plans a step differently from the engine (another
budget, chunking, admission or preemption order) moves some token and fails.

What the two legitimately do differently is kept out of the comparison: prefix caching is off
(the simulator's prompts are all token 0 and share every block, real prompts share none), and
replies run to their length (ignore_eos; the simulator has no model to stop early).

How the simulator's cost model compares with the live CPU stack's wall clock is a benchmark,
not a test (`python -m bench sim-trust`): a shared two-core machine's timing is not behaviour.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from build_engines.checkpoint import llama_config_dict, random_llama_tensors
from engine.config import EngineConfig, ModelConfig
from engine.model import NumpyLlama
from engine.weights import llama_weights_from_tensors
from simulator.cost_model import LinearCost
from simulator.engine_trace import EngineTrace, record_engine_trace
from simulator.trace_replay import TraceRequest, replay

# Costs on the scale of the `small` model's CPU steps; odd figures so float rounding would show.
COST = LinearCost(base_s=1.37e-3, per_token_s=23.1e-6, per_context_token_s=0.071e-6)
# 16 requests over ~0.5 s of virtual time (≈ 1.4 ms a decode step): replies overlap, prompts from
# chat to several chunks. Two arrive together at an idle engine, two together while it is busy.
ARRIVALS = (0.0, 0.0, 0.011, 0.04, 0.07, 0.07, 0.12, 0.15, 0.2, 0.23, 0.29, 0.33, 0.38, 0.41, 0.47, 0.5)
TRACE = [
    TraceRequest(t, (48, 200, 32, 600, 64, 120, 7, 350)[i % 8], (60, 40, 90, 25, 70)[i % 5])
    for i, t in enumerate(ARRIVALS)
]
# The CPU pool's scheduling (switchyard.yaml: cost budget, chunked prefill), without prefix
# caching and with a KV cache nothing runs out of.
ROOMY = EngineConfig(
    kv_capacity_tokens=8192,
    block_size=16,
    max_num_batched_tokens=512,
    max_step_cost=4096.0,
    attention_cost_tokens=256.0,
    enable_prefix_caching=False,
)
CONFIGS = {
    "cpu-pool": ROOMY,
    # Little KV and few slots: admission waits, running replies preempt each other (recompute),
    # long reads yield to short ones.
    "tight": replace(ROOMY, kv_capacity_tokens=1024, max_num_seqs=6, long_prefill_tokens=64),
    # The benchmarks' baseline: whole prompts in one step.
    "unchunked": replace(ROOMY, enable_chunked_prefill=False),
    # The CPU pools' express lane (S1): replies of 25 and 40 tokens go before the others.
    "express": replace(ROOMY, express_max_tokens=40),
}


def tiny_llama(config: EngineConfig) -> NumpyLlama:
    """A 2-layer Llama with random weights and a KV cache of `config`'s blocks."""
    raw = llama_config_dict(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )
    model_config = ModelConfig.from_dict(raw)
    weights = llama_weights_from_tensors(model_config, random_llama_tensors(model_config, seed=7))
    return NumpyLlama(weights, config.num_blocks, config.block_size)


def record(config: EngineConfig) -> EngineTrace:
    return record_engine_trace(TRACE, config, tiny_llama(config), COST)


@pytest.mark.parametrize("name", CONFIGS)
def test_the_simulator_replays_the_engine_exactly(name: str) -> None:
    config = CONFIGS[name]
    engine = record(config)
    simulated = replay(TRACE, config, COST)
    assert [len(gaps) for gaps in engine.result.gaps_s] == [r.reply_tokens - 1 for r in TRACE]
    if name == "tight":
        assert engine.num_preemptions > 0, "the tight configuration should exercise preemption"
    if name == "express":
        assert engine.result.gaps_s != record(ROOMY).result.gaps_s, "the express lane should change the steps"
    for i, request in enumerate(TRACE):
        assert simulated.ttft_s[i] == engine.result.ttft_s[i], f"TTFT of request {i} ({request})"
        assert simulated.gaps_s[i] == engine.result.gaps_s[i], f"gaps of request {i} ({request})"


def test_a_simulator_planning_other_steps_disagrees() -> None:
    """The comparison can fail: replaying with a different step budget than the engine ran
    with (a simulator whose scheduler drifted) moves first tokens."""
    engine = record(ROOMY)
    drifted = replay(TRACE, replace(ROOMY, max_num_batched_tokens=256), COST)
    assert drifted.ttft_s != engine.result.ttft_s


def test_the_recording_refuses_prefix_caching() -> None:
    config = replace(ROOMY, enable_prefix_caching=True)
    with pytest.raises(ValueError, match="enable_prefix_caching"):
        record_engine_trace(TRACE, config, tiny_llama(config), COST)
