"""Every key the build writes into a `model.yaml` is an LLM API argument the pinned TensorRT-LLM
release documents, of the documented type, within the documented values
(build_engines/llm_api_schema.py). No GPU runs the file here, so this is where a misspelt,
removed or mistyped key is caught: the cases below prove each kind is."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from build_engines.llm_api_args import llm_api_args
from build_engines.llm_api_schema import ARGS_BY_PATH, DOCUMENTED_ARGS, keys_of, llm_api_problems
from build_engines.repository import fill_repository
from config.settings import ServingSpec, SwitchyardConfig, load_config

LLM_API = ServingSpec(target="trtllm", trtllm_engine="llmapi")


def gpu_config(
    tmp_path: Path, *, dtype: str = "float16", gpus: int = 1, chunked: bool = True, reuse: bool = True
) -> SwitchyardConfig:
    """The repository's switchyard.yaml on the LLM API path, writing under tmp_path, with one
    model setting and one pool setting varied."""
    config = load_config()
    models = {
        model_id: model.model_copy(
            update={"weights_uri": str(config.model_dir(model_id).resolve()), "dtype": dtype, "gpus_per_copy": gpus}
        )
        for model_id, model in config.models.items()
    }
    pools = {
        pool_id: pool.model_copy(
            update={
                "engine": pool.engine.model_copy(
                    update={"enable_chunked_prefill": chunked, "enable_prefix_caching": reuse}
                )
            }
        )
        for pool_id, pool in config.pools.items()
    }
    return config.model_copy(
        update={"var_dir": str(tmp_path / "var"), "models": models, "pools": pools, "serving": LLM_API}
    )


def key_paths(args: dict[str, Any]) -> set[str]:
    """Every key of a model.yaml as a dotted path (`kv_cache_config.max_tokens`)."""
    paths = set()
    for key, value in args.items():
        paths.add(key)
        if isinstance(value, dict):
            paths |= {f"{key}.{inner}" for inner in value}
    return paths


SETTINGS = list(itertools.product(["float16", "bfloat16", "fp8"], [1, 2], [True, False], [True, False]))


@pytest.mark.parametrize(("dtype", "gpus", "chunked", "reuse"), SETTINGS)
def test_every_generated_key_is_documented_with_its_type_and_values(
    tmp_path: Path, dtype: str, gpus: int, chunked: bool, reuse: bool
) -> None:
    config = gpu_config(tmp_path, dtype=dtype, gpus=gpus, chunked=chunked, reuse=reuse)
    for pool_id in config.pools:
        args = llm_api_args(config, pool_id)
        undocumented = key_paths(args) - set(ARGS_BY_PATH)
        assert not undocumented, f"pool {pool_id}: not documented LLM API arguments: {sorted(undocumented)}"
        assert llm_api_problems(args) == []


def test_the_written_model_yaml_reads_back_as_documented_arguments(tmp_path: Path) -> None:
    """What Triton's model loads is the YAML file, not the dict: types survive the round trip."""
    config = gpu_config(tmp_path)
    for pool_id in config.pools:
        repo = fill_repository(config, pool_id)
        args = yaml.safe_load((repo / "tensorrt_llm" / "model.yaml").read_text())
        assert key_paths(args) <= set(ARGS_BY_PATH)
        assert llm_api_problems(args) == []


def test_the_generated_file_has_no_deprecated_backend_and_keeps_the_tokenizer_for_grammars(tmp_path: Path) -> None:
    """`backend` is deprecated and hidden from the reference (`LLM` is the PyTorch LLM), and the
    PyTorch backend builds the grammar matcher from the LLM's tokenizer."""
    args = llm_api_args(gpu_config(tmp_path), "large")
    assert "backend" not in args
    assert args["guided_decoding_backend"] == "llguidance"
    assert args["skip_tokenizer_init"] is False


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        # misspelt
        ({"max_num_token": 2048}, "unknown LLM argument 'max_num_token'"),
        ({"guided_decoding_backends": "llguidance"}, "unknown LLM argument 'guided_decoding_backends'"),
        ({"kv_cache_config": {"enable_blok_reuse": True}}, "unknown kv_cache_config field 'enable_blok_reuse'"),
        # removed or never an LLM API argument of the PyTorch backend
        ({"enable_trtllm_sampler": True}, "unknown LLM argument 'enable_trtllm_sampler'"),
        ({"kv_cache_dtype": "fp8"}, "unknown LLM argument 'kv_cache_dtype'"),
        ({"build_config": {"max_batch_size": 8}}, "unknown LLM argument 'build_config'"),
        ({"backend": "pytorch"}, "unknown LLM argument 'backend'"),
        ({"triton_config": {"decoupled": True}}, "unknown LLM argument 'triton_config'"),
        ({"scheduler_config": {"waiting_queue_policy": "priority"}}, "unknown scheduler_config field"),
        # documented, with a value of another kind or outside the documented set
        ({"max_batch_size": "64"}, "max_batch_size must be int, got '64'"),
        ({"enable_chunked_prefill": "true"}, "enable_chunked_prefill must be bool"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size 0 is below 1"),
        ({"dtype": "fp8"}, "dtype 'fp8' is not one of"),
        ({"guided_decoding_backend": "outlines"}, "guided_decoding_backend 'outlines' is not one of"),
        ({"kv_cache_config": {"free_gpu_memory_fraction": 1.5}}, "free_gpu_memory_fraction 1.5 is above 1.0"),
        ({"kv_cache_config": {"tokens_per_block": True}}, "kv_cache_config.tokens_per_block must be int"),
        ({"kv_cache_config": 0.9}, "kv_cache_config must be a mapping"),
        ({"scheduler_config": {"capacity_scheduler_policy": "FCFS"}}, "capacity_scheduler_policy 'FCFS'"),
        ({"scheduler_config": {"context_chunking_policy": "fcfs"}}, "context_chunking_policy 'fcfs'"),
        # documented keys the release cannot load together
        ({"skip_tokenizer_init": True}, "guided_decoding_backend needs the LLM's tokenizer"),
    ],
)
def test_a_misspelt_removed_or_mistyped_key_in_the_generated_file_is_found(
    tmp_path: Path, change: dict[str, Any], problem: str
) -> None:
    args = llm_api_args(gpu_config(tmp_path), "small")
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(args.get(key), dict):
            args[key] = {**args[key], **value}
        else:
            args[key] = value
    problems = llm_api_problems(args)
    assert len(problems) == 1, problems
    assert problem in problems[0]


def test_the_record_is_consistent() -> None:
    """Each nested field sits in a documented section, paths are unique, and a section is a dict."""
    assert len(ARGS_BY_PATH) == len(DOCUMENTED_ARGS)
    sections = {arg.path for arg in DOCUMENTED_ARGS if arg.kind is dict}
    assert sections == {"kv_cache_config", "scheduler_config"}
    for arg in DOCUMENTED_ARGS:
        assert arg.section is None or arg.section in sections, arg.path
        assert arg.status in {"stable", "beta", "prototype"}, arg.path
        assert arg.owner in {"BaseLlmArgs", "TorchLlmArgs", "KvCacheConfig", "SchedulerConfig"}, arg.path
    assert keys_of("kv_cache_config") >= {"enable_block_reuse", "max_tokens", "free_gpu_memory_fraction"}
    assert "backend" not in keys_of(None)


def test_a_float_argument_takes_an_integer_and_a_bool_is_never_a_number() -> None:
    assert llm_api_problems({"model": "m", "kv_cache_config": {"free_gpu_memory_fraction": 1}}) == []
    assert llm_api_problems({"model": "m", "kv_cache_config": {"free_gpu_memory_fraction": True}}) == [
        "kv_cache_config.free_gpu_memory_fraction must be float, got True"
    ]
