"""`plan_model`: the sizing arithmetic, checked number for number (the brief's and Llama's)."""

from __future__ import annotations

import pytest

from build_engines.sizing import (
    PlanInputs,
    choose_max_batch_size,
    choose_max_num_tokens,
    kv_bytes_per_token,
    kv_bytes_per_token_of,
    plan_model,
)
from config.settings import Architecture

BRIEF_KV_BYTES = 500_000  # 0.5 MB a token


def brief_inputs(**overrides: object) -> PlanInputs:
    fields: dict[str, object] = {"gpu_memory_gb": 80.0, "weights_gb": 40.0, "kv_bytes_per_token": BRIEF_KV_BYTES}
    fields.update(overrides)
    return PlanInputs(**fields)  # type: ignore[arg-type]


def test_the_brief_idealised_case_gives_80000_tokens_and_35_requests() -> None:
    # The brief counts everything left after the weights as KV: no reserve, fraction 1.
    plan = plan_model(brief_inputs(runtime_reserve_gb=0.0, kv_memory_fraction=1.0))
    assert plan.free_gb_per_gpu == 40.0
    assert plan.kv_tokens_per_copy == 80_000  # 40 GB / 0.5 MB
    assert plan.tokens_after_weights_per_copy == 80_000
    assert plan.avg_request_tokens == 2_300  # 2,000 prompt + 300 reply
    assert plan.requests_per_copy == pytest.approx(80_000 / 2_300)  # 34.78...
    assert round(plan.requests_per_copy) == 35
    assert plan.max_batch_size == 40  # 34.8 rounded up to a multiple of 8
    assert plan.max_num_tokens == 2_048  # 2,000 + 40 -> 2,048


def test_the_engines_pool_keeps_a_reserve_and_a_fraction_back() -> None:
    plan = plan_model(brief_inputs())  # defaults: 2 GB reserve, 0.9 of the rest
    assert plan.tokens_after_weights_per_copy == 80_000
    assert plan.kv_cache_gb_per_gpu == 34.2  # (40 - 2) x 0.9
    assert plan.kv_tokens_per_copy == 68_400
    assert plan.requests_per_copy == pytest.approx(68_400 / 2_300)  # 29.7
    assert plan.max_batch_size == 32


def test_kv_bytes_per_token_of_a_llama_2_70b_shape() -> None:
    assert kv_bytes_per_token(80, 8, 128, "float16") == 327_680  # 80 x 8 x 128 x 2 x 2
    assert kv_bytes_per_token(80, 8, 128, "bfloat16") == 327_680
    assert kv_bytes_per_token(80, 8, 128, "fp8") == 163_840
    llama_70b = Architecture(
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        vocab_size=32000,
    )
    assert kv_bytes_per_token_of(llama_70b, "float16") == 327_680  # head dim 8192 / 64 = 128


def test_unknown_dtype_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        kv_bytes_per_token(80, 8, 128, "int3")


def test_a_copy_over_several_gpus_spreads_weights_and_pools_kv() -> None:
    # 140 GB of fp16 Llama-2-70B over 4 GPUs: 35 GB each, 45 GB free, (45 - 2) x 0.9 = 38.7 GB of KV each.
    plan = plan_model(PlanInputs(gpu_memory_gb=80.0, weights_gb=140.0, kv_bytes_per_token=327_680, gpus_per_copy=4))
    assert plan.weights_gb_per_gpu == 35.0
    assert plan.free_gb_per_gpu == 45.0
    assert plan.kv_cache_gb_per_gpu == 38.7
    assert plan.kv_tokens_per_copy == 38_700_000_000 * 4 // 327_680 == 472_412
    assert plan.max_batch_size == 208  # 205.4 up to a multiple of 8
    assert plan.max_num_tokens == 4_096  # 2,000 + 208 -> 4,096


def test_weights_that_do_not_fit_are_an_error() -> None:
    with pytest.raises(ValueError, match="nothing is left for the KV cache"):
        plan_model(brief_inputs(weights_gb=90.0))
    with pytest.raises(ValueError, match="nothing is left"):
        plan_model(brief_inputs(weights_gb=78.5))  # fits alone, not with the 2 GB reserve
    plan_model(brief_inputs(weights_gb=140.0, gpus_per_copy=2))  # 70 GB a GPU: fits


def test_a_cache_smaller_than_one_request_is_an_error() -> None:
    with pytest.raises(ValueError, match="less than one average request"):
        plan_model(brief_inputs(weights_gb=77.0, runtime_reserve_gb=0.0, kv_memory_fraction=0.3))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gpu_memory_gb", 0.0),
        ("weights_gb", -1.0),
        ("kv_bytes_per_token", 0),
        ("gpus_per_copy", 0),
        ("avg_prompt_tokens", 0),
        ("kv_memory_fraction", 0.0),
        ("kv_memory_fraction", 1.5),
    ],
)
def test_bad_inputs_are_rejected(field: str, value: float) -> None:
    with pytest.raises(ValueError):
        brief_inputs(**{field: value})


def test_batch_size_and_token_budget_rules() -> None:
    assert choose_max_batch_size(0.5) == 8
    assert choose_max_batch_size(8.0) == 8
    assert choose_max_batch_size(8.01) == 16
    assert choose_max_batch_size(1_000_000.0) == 2_048
    assert choose_max_num_tokens(100, 8) == 2_048  # floor
    assert choose_max_num_tokens(2_048, 0) == 2_048
    assert choose_max_num_tokens(2_049, 0) == 4_096
    assert choose_max_num_tokens(30_000, 2_048) == 8_192  # ceiling: long prompts go in chunks
