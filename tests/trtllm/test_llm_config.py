"""model.yaml and the checkpoint's config.json as the LLM's arguments and the loop's limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bls.model_config import ModelConfigError
from trtllm.engine_loop import EngineLimits
from trtllm.llm_config import engine_limits, load_llm_args

PARAMS = {"max_batch_size": "8", "planned_kv_tokens": "4096", "tokens_per_block": "32"}


def checkpoint(tmp_path: Path, **overrides: Any) -> Path:
    config: dict[str, Any] = {"vocab_size": 32000, "max_position_embeddings": 4096, "eos_token_id": 2}
    config.update(overrides)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({key: v for key, v in config.items() if v is not None}))
    return model


def test_load_llm_args_reads_the_mapping(tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_text("model: /models/llama\nmax_batch_size: 16\nkv_cache_config:\n  enable_block_reuse: true\n")
    assert load_llm_args(path) == {
        "model": "/models/llama",
        "max_batch_size": 16,
        "kv_cache_config": {"enable_block_reuse": True},
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "cannot read the LLM arguments"),
        ("model: [unclosed\n", "cannot read the LLM arguments"),
        ("- model\n", "must be a mapping with at least `model`"),
        ("max_batch_size: 8\n", "must be a mapping with at least `model`"),
    ],
)
def test_load_llm_args_errors_name_the_file(tmp_path: Path, text: str | None, problem: str) -> None:
    path = tmp_path / "model.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ModelConfigError, match=problem) as info:
        load_llm_args(path)
    assert str(path) in str(info.value)


def test_the_llm_arguments_win_over_the_checkpoint_and_the_plan(tmp_path: Path) -> None:
    llm_args = {
        "model": str(checkpoint(tmp_path)),
        "max_seq_len": 2048,
        "max_batch_size": 16,
        "kv_cache_config": {"max_tokens": 8192, "tokens_per_block": 64},
    }
    assert engine_limits(llm_args, PARAMS) == EngineLimits(
        vocab_size=32000, max_seq_len=2048, max_batch_size=16, kv_tokens=8192, tokens_per_block=64, end_id=2
    )


def test_without_them_the_checkpoint_and_the_plan_give_the_limits(tmp_path: Path) -> None:
    llm_args = {"model": str(checkpoint(tmp_path)), "kv_cache_config": {"free_gpu_memory_fraction": 0.9}}
    assert engine_limits(llm_args, PARAMS) == EngineLimits(32000, 4096, 8, 4096, 32, 2)


def test_the_first_of_several_eos_ids_is_the_end_id(tmp_path: Path) -> None:
    llm_args = {"model": str(checkpoint(tmp_path, eos_token_id=[128001, 128009]))}
    assert engine_limits(llm_args, PARAMS).end_id == 128001


def test_a_missing_checkpoint_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="cannot read the checkpoint's config"):
        engine_limits({"model": str(tmp_path / "nowhere")}, PARAMS)


def test_a_checkpoint_config_without_the_keys_names_them(tmp_path: Path) -> None:
    llm_args = {"model": str(checkpoint(tmp_path, vocab_size=None, eos_token_id=None))}
    with pytest.raises(ModelConfigError, match="has no vocab_size, eos_token_id"):
        engine_limits(llm_args, PARAMS)


def test_a_plan_figure_missing_from_config_pbtxt_is_an_error(tmp_path: Path) -> None:
    llm_args = {"model": str(checkpoint(tmp_path))}
    with pytest.raises(ModelConfigError, match="'planned_kv_tokens' is missing"):
        engine_limits(llm_args, {"max_batch_size": "8", "tokens_per_block": "32"})
