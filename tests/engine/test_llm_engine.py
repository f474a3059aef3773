"""LLMEngine with a fake model: token streams, stop rules, validation, cancellation, and the
S1/S2/S3 properties at engine level (short answers are not held up, memory never overflows,
running streams never stall while a long prompt is read)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine.llm_engine as llm_engine_module
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.request import EngineRequest, FinishReason, RequestClass, RequestOutput, SamplingParams
from engine.scheduler import Scheduler, chunk_cost

BULK = RequestClass.BULK
Invariants = Callable[[Scheduler], None]


def build_engine(
    make_config: Callable[..., EngineConfig], make_model: Callable[..., Any], **overrides: Any
) -> tuple[LLMEngine, Any]:
    model_options = {key: overrides.pop(key) for key in ("eos_token_id", "digest") if key in overrides}
    max_model_len = overrides.pop("max_model_len", None)
    config = make_config(**overrides)
    model = make_model(config.num_blocks, config.block_size, **model_options)
    return LLMEngine(config, model, max_model_len=max_model_len), model


def run(engine: LLMEngine, invariants: Invariants, max_steps: int = 10_000) -> dict[str, list[RequestOutput]]:
    """Step until idle, checking block accounting after every step; outputs per request."""
    outputs: dict[str, list[RequestOutput]] = {}
    for _ in range(max_steps):
        if not engine.has_unfinished():
            return outputs
        for output in engine.step():
            outputs.setdefault(output.request_id, []).append(output)
        invariants(engine.scheduler)
    raise AssertionError("engine did not finish")


def tokens_of(outputs: list[RequestOutput]) -> list[int]:
    return [token for output in outputs for token in output.new_token_ids]


def test_greedy_reply_streams_deltas_and_totals(make_config: Any, make_model: Any, make_request: Any) -> None:
    engine, model = build_engine(make_config, make_model)
    engine.add_request(make_request("r", [1, 2, 3], max_tokens=5))
    first = engine.step()
    assert first == [RequestOutput("r", (4,), False, None, prompt_tokens=3, cached_tokens=0, completion_tokens=1)]
    rest = [output for _ in range(4) for output in engine.step()]
    assert [o.new_token_ids for o in rest] == [(5,), (6,), (7,), (8,)]
    assert [o.completion_tokens for o in rest] == [2, 3, 4, 5]
    assert rest[-1].finished and rest[-1].finish_reason is FinishReason.LENGTH
    assert not engine.has_unfinished()
    assert engine.stats().used_blocks == 0
    assert model.contexts[-1] == (1, 2, 3, 4, 5, 6, 7)  # the last step read every KV slot


@pytest.mark.parametrize(
    ("sampling", "expected", "reason"),
    [
        ({}, [4, 5, 6], FinishReason.STOP),  # eos is 6
        ({"ignore_eos": True}, [4, 5, 6, 7, 8, 9, 10, 11], FinishReason.LENGTH),
        ({"stop_token_ids": (5,)}, [4, 5], FinishReason.STOP),
        ({"stop_token_sequences": ((4, 5),), "ignore_eos": True}, [4, 5], FinishReason.STOP),
        # The prompt ends in 3: (3, 4) spans the prompt and must not stop the reply.
        (
            {"stop_token_sequences": ((3, 4),), "ignore_eos": True},
            [4, 5, 6, 7, 8, 9, 10, 11],
            FinishReason.LENGTH,
        ),
    ],
)
def test_stop_rules(
    make_config: Any,
    make_model: Any,
    invariants: Invariants,
    sampling: dict[str, Any],
    expected: list[int],
    reason: FinishReason,
) -> None:
    engine, _ = build_engine(make_config, make_model, eos_token_id=6)
    request = EngineRequest("r", (1, 2, 3), SamplingParams(max_tokens=8, **sampling))
    engine.add_request(request)
    outputs = run(engine, invariants)["r"]
    assert tokens_of(outputs) == expected
    assert outputs[-1].finish_reason is reason
    assert [o.finished for o in outputs] == [False] * (len(outputs) - 1) + [True]


def test_resumed_reply_continues_counts_and_draws_by_reply_index(
    make_config: Any,
    make_model: Any,
    make_request: Any,
    invariants: Invariants,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    indices: list[int] = []
    real_sample = llm_engine_module.sample_token

    def recording_sample(logits: np.ndarray, params: SamplingParams, index: int) -> int:
        indices.append(index)
        return real_sample(logits, params, index)

    monkeypatch.setattr(llm_engine_module, "sample_token", recording_sample)
    engine, model = build_engine(make_config, make_model)
    # A stop sequence spanning the resume boundary still counts: (5, 6) ends the reply.
    engine.add_request(make_request("r", [1, 2, 3], max_tokens=6, resume=(4, 5), stop_token_sequences=((5, 6),)))
    outputs = run(engine, invariants)["r"]
    assert tokens_of(outputs) == [6]
    assert outputs[-1].finish_reason is FinishReason.STOP
    assert (outputs[-1].prompt_tokens, outputs[-1].completion_tokens) == (3, 1)
    assert indices == [2]
    assert model.contexts == [(1, 2, 3, 4, 5)]

    indices.clear()
    engine.add_request(make_request("s", [1, 2, 3], max_tokens=5, resume=(4, 5)))
    outputs = run(engine, invariants)["s"]
    assert tokens_of(outputs) == [6, 7, 8]  # max_tokens counts the two resumed tokens
    assert outputs[-1].finish_reason is FinishReason.LENGTH
    assert indices == [2, 3, 4]


def test_context_limit_ends_the_reply_with_length(
    make_config: Any, make_model: Any, make_request: Any, invariants: Invariants
) -> None:
    engine, _ = build_engine(make_config, make_model, max_model_len=6)
    engine.add_request(make_request("r", [1, 2, 3], max_tokens=50))
    outputs = run(engine, invariants)["r"]
    assert tokens_of(outputs) == [4, 5, 6]
    assert outputs[-1].finish_reason is FinishReason.LENGTH


@pytest.mark.parametrize(
    ("request_kwargs", "message"),
    [
        ({"prompt": []}, "prompt is empty"),
        ({"max_tokens": 0}, "max_tokens must be >= 1"),
        ({"resume": (4, 5), "max_tokens": 2}, "leave nothing to generate"),
        ({"prompt": [1, 1000]}, "outside the vocabulary"),
        ({"prompt": [-1]}, "outside the vocabulary"),
        ({"prompt": list(range(8))}, "no room in the model's context"),
        ({"temperature": -0.5}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"stop_token_sequences": ((),)}, "empty sequence"),
    ],
)
def test_add_request_rejects_what_cannot_be_served(
    make_config: Any, make_model: Any, make_request: Any, request_kwargs: dict[str, Any], message: str
) -> None:
    engine, _ = build_engine(make_config, make_model, max_model_len=8)
    kwargs: dict[str, Any] = {"prompt": [1, 2], **request_kwargs}
    with pytest.raises(ValueError, match=message):
        engine.add_request(make_request("r", **kwargs))
    assert not engine.has_unfinished()


def test_duplicate_request_id_is_rejected_while_running(
    make_config: Any, make_model: Any, make_request: Any, invariants: Invariants
) -> None:
    engine, _ = build_engine(make_config, make_model)
    engine.add_request(make_request("r", [1, 2]))
    with pytest.raises(ValueError, match="already running"):
        engine.add_request(make_request("r", [3]))
    run(engine, invariants)
    engine.add_request(make_request("r", [3]))  # a finished id may be used again


def test_cancel_takes_effect_at_the_next_step_and_frees_blocks(
    make_config: Any, make_model: Any, make_request: Any
) -> None:
    engine, _ = build_engine(make_config, make_model)
    engine.add_request(make_request("r", range(10), max_tokens=20))
    engine.add_request(make_request("waiting", range(20, 80), max_tokens=2))  # cannot fit yet
    engine.step()
    assert engine.stats().used_blocks == 3
    assert engine.cancel("r") and engine.cancel("waiting")
    assert not engine.cancel("unknown")
    assert engine.stats().used_blocks == 3  # nothing happens until the step
    outputs = engine.step()
    assert [(o.request_id, o.finished, o.finish_reason, o.new_token_ids) for o in outputs] == [
        ("r", True, FinishReason.CANCELLED, ()),
        ("waiting", True, FinishReason.CANCELLED, ()),
    ]
    assert outputs[0].completion_tokens == 1
    assert engine.stats().used_blocks == 0
    assert not engine.has_unfinished()


def test_prefix_cache_hit_reports_cached_tokens_and_reads_the_right_kv(
    make_config: Any, make_model: Any, make_request: Any, invariants: Invariants
) -> None:
    engine, model = build_engine(make_config, make_model, digest=True)
    engine.add_request(make_request("first", range(10), max_tokens=3, namespace="team-a"))
    run(engine, invariants)
    prompt = [*range(9), 40]
    engine.add_request(make_request("again", prompt, max_tokens=3, namespace="team-a"))
    engine.add_request(make_request("other-team", prompt, max_tokens=3, namespace="team-b"))
    outputs = run(engine, invariants)
    assert outputs["again"][-1].cached_tokens == 8
    assert outputs["other-team"][-1].cached_tokens == 0
    assert engine.stats().reused_blocks == 2
    assert tokens_of(outputs["again"]) == model.reply(prompt, 3)
    assert tokens_of(outputs["other-team"]) == model.reply(prompt, 3)


def test_model_failure_aborts_that_step_and_the_engine_goes_on(
    make_config: Any, make_model: Any, make_request: Any, invariants: Invariants
) -> None:
    engine, model = build_engine(make_config, make_model)
    engine.add_request(make_request("a", [1, 2], max_tokens=5))
    engine.add_request(make_request("b", [3, 4], max_tokens=5))
    engine.step()
    model.fail_next = True
    outputs = engine.step()
    assert {(o.request_id, o.finish_reason) for o in outputs} == {
        ("a", FinishReason.ABORTED),
        ("b", FinishReason.ABORTED),
    }
    assert engine.stats().used_blocks == 0
    engine.add_request(make_request("c", [1, 2], max_tokens=2))
    assert tokens_of(run(engine, invariants)["c"]) == [3, 4]


def test_sampling_failure_aborts_only_that_request(
    make_config: Any,
    make_model: Any,
    make_request: Any,
    invariants: Invariants,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_sample = llm_engine_module.sample_token

    def picky_sample(logits: np.ndarray, params: SamplingParams, index: int) -> int:
        if params.max_tokens == 7:
            raise FloatingPointError("nan logits")
        return real_sample(logits, params, index)

    monkeypatch.setattr(llm_engine_module, "sample_token", picky_sample)
    engine, _ = build_engine(make_config, make_model)
    engine.add_request(make_request("bad", [1, 2], max_tokens=7))
    engine.add_request(make_request("good", [1, 2], max_tokens=3))
    outputs = run(engine, invariants)
    assert [(o.finish_reason, o.new_token_ids) for o in outputs["bad"]] == [(FinishReason.ABORTED, ())]
    assert tokens_of(outputs["good"]) == [3, 4, 5]


def test_request_that_can_never_fit_is_aborted(make_config: Any, make_model: Any, make_request: Any) -> None:
    engine, _ = build_engine(make_config, make_model)  # 64 KV slots
    engine.add_request(make_request("huge", range(10), max_tokens=100))
    assert engine.step() == [RequestOutput("huge", (), True, FinishReason.ABORTED, 10, 0, 0)]
    assert not engine.has_unfinished()


def test_stats_report_blocks_and_requests(make_config: Any, make_model: Any, make_request: Any) -> None:
    engine, _ = build_engine(make_config, make_model, max_num_seqs=2, max_num_batched_tokens=6)
    for i in range(3):
        engine.add_request(make_request(f"r{i}", range(i * 10, i * 10 + 5), max_tokens=3))
    stats = engine.stats()
    assert (stats.max_blocks, stats.tokens_per_block, stats.max_requests) == (16, 4, 2)
    assert (stats.active_requests, stats.waiting_requests, stats.scheduled_requests) == (0, 3, 0)
    engine.step()  # r0 reads 5 tokens, r1 one token of its prompt; r2 waits for a seat
    stats = engine.stats()
    assert (stats.active_requests, stats.waiting_requests) == (2, 1)
    assert (stats.scheduled_requests, stats.context_requests) == (2, 2)
    assert (stats.used_blocks, stats.free_blocks) == (4, 12)
    # None a person may take (flex's and bulk's).
    assert stats.class_kv_metrics() == {"priority": 0, "interactive": 4, "flex": 0, "bulk": 0}
    engine.step()  # r0 decodes, r1 reads its last 4 prompt tokens
    assert engine.stats().request_metrics() == {
        "active": 2,
        "max": 2,
        "scheduled": 2,
        "context": 1,
        "waiting": 1,
    }
    assert stats.kv_cache_block_metrics() == {"max": 16, "free": 12, "used": 4, "tokens_per": 4, "reused": 0}


def test_s1_short_answer_is_not_held_up_by_long_replies(make_config: Any, make_model: Any, make_request: Any) -> None:
    def steps_to_finish(engine: LLMEngine, request_id: str) -> int:
        for step in range(1, 1000):
            if any(o.request_id == request_id and o.finished for o in engine.step()):
                return step
        raise AssertionError("never finished")

    idle, _ = build_engine(make_config, make_model, kv_capacity_tokens=8192, block_size=16)
    idle.add_request(make_request("short", range(5), max_tokens=10, ignore_eos=True))
    idle_steps = steps_to_finish(idle, "short")

    busy, _ = build_engine(make_config, make_model, kv_capacity_tokens=8192, block_size=16)
    for i in range(8):
        busy.add_request(make_request(f"long{i}", range(i, i + 100), max_tokens=500, ignore_eos=True))
    for _ in range(20):
        busy.step()
    busy.add_request(make_request("short", range(5), max_tokens=10, ignore_eos=True))
    assert steps_to_finish(busy, "short") == idle_steps == 10
    assert busy.stats().active_requests == 8


def test_s2_long_prompt_meets_a_full_cache(
    make_config: Any, make_model: Any, make_request: Any, invariants: Invariants
) -> None:
    engine, model = build_engine(make_config, make_model, kv_capacity_tokens=512, block_size=16, digest=True)
    chats = {f"chat{i}": list(range(i, i + 80)) for i in range(4)}  # most of the cache
    bulk = {f"bulk{i}": list(range(200 + i, 260 + i)) for i in range(2)}  # and the rest
    for request_id, prompt in chats.items():
        engine.add_request(make_request(request_id, prompt, max_tokens=30, ignore_eos=True))
    for request_id, prompt in bulk.items():
        engine.add_request(make_request(request_id, prompt, max_tokens=40, request_class=BULK, ignore_eos=True))
    outputs: dict[str, list[RequestOutput]] = {}
    for output in engine.step():
        outputs.setdefault(output.request_id, []).append(output)
    assert engine.stats().free_blocks == 4
    document = list(range(300, 550))  # needs 16 blocks
    engine.add_request(make_request("document", document, max_tokens=5, ignore_eos=True))
    preempted = set()
    while engine.has_unfinished():
        before = {seq.request_id for seq in engine.scheduler.unfinished() if seq.num_preemptions}
        got = {o.request_id: o for o in engine.step()}
        preempted |= {seq.request_id for seq in engine.scheduler.unfinished() if seq.num_preemptions} - before
        invariants(engine.scheduler)  # used <= capacity, refs consistent, every step
        for request_id, output in got.items():
            outputs.setdefault(request_id, []).append(output)
        for request_id in chats:  # the interactive streams never miss a step
            done = request_id in outputs and outputs[request_id][-1].finished
            assert done or request_id in got, f"{request_id} stalled"
    assert preempted == {"bulk0", "bulk1"}  # only bulk gave way
    assert all(out[-1].finish_reason is FinishReason.LENGTH for out in outputs.values())
    for request_id, prompt in chats.items():
        assert tokens_of(outputs[request_id]) == model.reply(prompt, 30)
    for request_id, prompt in bulk.items():  # recomputed after preemption: same tokens
        assert tokens_of(outputs[request_id]) == model.reply(prompt, 40)
    assert tokens_of(outputs["document"]) == model.reply(document, 5)
    assert engine.stats().used_blocks == 0


def test_s3_running_streams_keep_their_pace_while_a_document_is_read(
    make_config: Any, make_model: Any, make_request: Any
) -> None:
    engine, model = build_engine(
        make_config,
        make_model,
        kv_capacity_tokens=8192,
        block_size=16,
        max_step_cost=256.0,
        attention_cost_tokens=64.0,
    )
    for i in range(16):
        engine.add_request(make_request(f"stream{i}", range(i, i + 20), max_tokens=500, ignore_eos=True))
    while engine.stats().context_requests or not engine.stats().scheduled_requests:
        engine.step()  # until every stream is decoding
    engine.add_request(make_request("document", [t % 1000 for t in range(1500)], max_tokens=1))
    budget, per_attended = engine.config.max_step_cost, engine.config.attention_cost_tokens
    document_chunks = []
    while engine.scheduler.get("document") is not None:
        got = {o.request_id for o in engine.step()}
        assert {f"stream{i}" for i in range(16)} <= got  # a token for every stream, every step
        chunks = model.steps[-1]
        assert sum(chunk_cost(c.start_position, len(c.token_ids), per_attended) for c in chunks) <= budget
        document_chunks.extend(len(c.token_ids) for c in chunks if len(c.token_ids) > 1)
    assert len(document_chunks) > 20  # read in many chunks...
    assert document_chunks[0] > 100 > 10 > document_chunks[-2]  # ...that shrink as they go deeper


def test_replies_are_exact_under_memory_pressure_preemption_and_prefix_hits(
    make_config: Any, make_model: Any, make_request: Any, invariants: Invariants
) -> None:
    """A random mixed workload in a cache far too small: every reply equals the KV-free reference."""
    rng = random.Random(11)
    engine, model = build_engine(
        make_config,
        make_model,
        kv_capacity_tokens=192,
        block_size=4,
        max_num_batched_tokens=24,
        max_step_cost=40.0,
        digest=True,
    )
    shared = [rng.randrange(1000) for _ in range(16)]
    expected: dict[str, list[int]] = {}
    outputs: dict[str, list[RequestOutput]] = {}
    for i in range(40):
        prompt = shared[: rng.randrange(0, 17)] + [rng.randrange(1000) for _ in range(rng.randrange(1, 30))]
        max_tokens = rng.randrange(1, 40)
        cls = rng.choice([RequestClass.INTERACTIVE, BULK])
        engine.add_request(make_request(f"r{i}", prompt, max_tokens, cls, ignore_eos=True))
        expected[f"r{i}"] = model.reply(prompt, max_tokens)
        for _ in range(rng.randrange(4)):
            for output in engine.step():
                outputs.setdefault(output.request_id, []).append(output)
            invariants(engine.scheduler)
    for request_id, got in run(engine, invariants).items():
        outputs.setdefault(request_id, []).extend(got)
    assert {request_id: tokens_of(got) for request_id, got in outputs.items()} == expected
    assert engine.scheduler.num_preemptions > 0
    assert engine.stats().reused_blocks > 0


def test_from_pretrained_serves_a_real_checkpoint_the_same_under_pressure(
    tmp_path: Any, make_request: Any, invariants: Invariants
) -> None:
    """Real numpy Llama: replies batched, chunked, prefix-cached and preempted in a tiny cache
    are token-for-token those of each request run alone in a roomy one."""
    from build_engines.checkpoint import llama_config_dict, write_random_checkpoint

    config_dict = llama_config_dict(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    write_random_checkpoint(config_dict, seed=3, out_dir=tmp_path)
    shared = [5 + i % 90 for i in range(20)]
    prompts = {f"r{i}": [*shared[: 8 + 4 * i], 40 + i, 41 + i] for i in range(4)}

    def replies(config: EngineConfig, together: bool) -> tuple[dict[str, list[int]], LLMEngine]:
        engine = LLMEngine.from_pretrained(tmp_path, config)
        assert engine.max_model_len == 64
        got: dict[str, list[int]] = {}
        groups = [list(prompts)] if together else [[request_id] for request_id in prompts]
        for group in groups:
            for i, request_id in enumerate(group):
                cls = BULK if i % 2 else RequestClass.INTERACTIVE
                engine.add_request(make_request(request_id, prompts[request_id], 12, cls, ignore_eos=True))
            for request_id, outputs in run(engine, invariants).items():
                got[request_id] = tokens_of(outputs)
        return got, engine

    alone, _ = replies(EngineConfig(kv_capacity_tokens=1024, enable_prefix_caching=False), together=False)
    tight = EngineConfig(kv_capacity_tokens=64, block_size=4, max_num_batched_tokens=8, max_step_cost=12.0)
    together, engine = replies(tight, together=True)
    assert together == alone
    assert all(len(tokens) == 12 for tokens in alone.values())
    assert engine.scheduler.num_preemptions > 0 and engine.stats().reused_blocks > 0
