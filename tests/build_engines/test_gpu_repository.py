"""The GPU targets' model repositories: every config Triton would load parses as its
`ModelConfig` protobuf, nothing is left unfilled, and every model.yaml is sized by the plan
(what it may hold at all: tests/build_engines/test_llm_api_schema.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from build_engines.legacy_engine import build_script, engine_dir
from build_engines.llm_api_args import GPU_TOKENS_PER_BLOCK, llm_api_args, pool_plan
from build_engines.llm_api_schema import llm_api_problems
from build_engines.repository import fill_repository
from config.settings import ServingSpec, SwitchyardConfig, load_config

TARGETS = [
    ServingSpec(target="cpu"),
    ServingSpec(target="trtllm", trtllm_engine="llmapi"),
    ServingSpec(target="trtllm", trtllm_engine="legacy"),
]


def project_config(tmp_path: Path, serving: ServingSpec, **gpu: float) -> SwitchyardConfig:
    """The repository's own switchyard.yaml, writing under tmp_path."""
    config = load_config()
    models = {
        model_id: model.model_copy(update={"weights_uri": str(config.model_dir(model_id).resolve())})
        for model_id, model in config.models.items()
    }
    return config.model_copy(
        update={
            "var_dir": str(tmp_path / "var"),
            "models": models,
            "serving": serving,
            "gpu": config.gpu.model_copy(update=gpu),
        }
    )


def parse_model_config(path: Path) -> Any:
    text = path.read_text()
    assert "${" not in text, f"{path} has an unfilled placeholder"
    return text_format.Parse(text, model_config_pb2.ModelConfig())


@pytest.mark.parametrize("serving", TARGETS, ids=lambda s: f"{s.target}-{s.trtllm_engine}")
def test_every_generated_config_parses_as_triton_model_config(tmp_path: Path, serving: ServingSpec) -> None:
    config = project_config(tmp_path, serving)
    engine_name = "cpu_engine" if serving.target == "cpu" else "tensorrt_llm"
    for pool_id in config.pools:
        repo = fill_repository(config, pool_id)
        models = sorted(path.name for path in repo.iterdir())
        # The CPU engine runs inside `llm` (engine_in_process, the default): no model of its own.
        in_process = serving.target == "cpu" and config.pools[pool_id].engine_in_process
        assert models == sorted(["llm", "preprocessing", "postprocessing", *([] if in_process else [engine_name])])
        parsed = {name: parse_model_config(repo / name / "config.pbtxt") for name in models}
        for name, model_config in parsed.items():
            assert model_config.name == name
            assert (repo / name / "1").is_dir()
        llm_params = parsed["llm"].parameters
        assert llm_params["engine_model_name"].string_value == engine_name
        dialect = (
            "tensorrtllm_cpp" if serving.trtllm_engine == "legacy" and serving.target == "trtllm" else "switchyard"
        )
        assert llm_params["engine_dialect"].string_value == dialect


def test_llm_api_engine_takes_the_cpu_engine_tensors(tmp_path: Path) -> None:
    """Only the engine changes between targets: `llm` sends both the same tensors (the CPU
    engine as a model of its own, as it runs when not inside `llm`)."""
    cpu_config = project_config(tmp_path / "cpu", TARGETS[0])
    pools = {pid: pool.model_copy(update={"engine_in_process": False}) for pid, pool in cpu_config.pools.items()}
    cpu = fill_repository(cpu_config.model_copy(update={"pools": pools}), "small")
    gpu = fill_repository(project_config(tmp_path / "gpu", TARGETS[1]), "small")
    cpu_engine = parse_model_config(cpu / "cpu_engine" / "config.pbtxt")
    trtllm = parse_model_config(gpu / "tensorrt_llm" / "config.pbtxt")
    assert list(trtllm.input) == list(cpu_engine.input)
    assert list(trtllm.output) == list(cpu_engine.output)
    assert trtllm.model_transaction_policy.decoupled
    assert trtllm.backend == "python"


def test_model_yaml_is_sized_by_the_plan_and_accepted_by_the_pin(tmp_path: Path) -> None:
    config = project_config(tmp_path, TARGETS[1])
    repo = fill_repository(config, "large")
    args = yaml.safe_load((repo / "tensorrt_llm" / "model.yaml").read_text())
    assert llm_api_problems(args) == []
    plan = pool_plan(config, "large")
    model = config.models["large"]
    assert args["model"] == str(config.model_dir("large").resolve())
    assert "backend" not in args  # deprecated; `tensorrt_llm.LLM` is the PyTorch LLM
    assert args["skip_tokenizer_init"] is False  # the grammar matcher needs the LLM's tokenizer
    assert args["tensor_parallel_size"] == model.gpus_per_copy
    assert args["max_batch_size"] == plan.max_batch_size
    assert args["max_num_tokens"] == plan.max_num_tokens
    assert args["max_seq_len"] == args["max_input_len"] == model.max_context_tokens
    assert args["enable_chunked_prefill"] is True
    assert args["enable_iter_perf_stats"] is True
    assert args["kv_cache_config"] == {
        "enable_block_reuse": True,
        "free_gpu_memory_fraction": config.gpu.kv_memory_fraction,
        "max_tokens": plan.kv_tokens_per_copy,
        "tokens_per_block": GPU_TOKENS_PER_BLOCK,
    }
    assert args["scheduler_config"] == {
        "capacity_scheduler_policy": "GUARANTEED_NO_EVICT",
        "context_chunking_policy": "FIRST_COME_FIRST_SERVED",
    }
    engine = parse_model_config(repo / "tensorrt_llm" / "config.pbtxt")
    assert engine.parameters["planned_kv_tokens"].string_value == str(plan.kv_tokens_per_copy)


def test_the_briefs_gpu_gives_80000_tokens_and_a_batch_of_40(tmp_path: Path) -> None:
    """80 GB GPU, 40 GB of weights, 0.5 MB a token, everything after the weights as KV."""
    config = project_config(tmp_path, TARGETS[1], runtime_reserve_gb=0.0, kv_memory_fraction=1.0)
    large = config.models["large"].model_copy(update={"weights_gb": 40.0, "kv_bytes_per_token": 500_000})
    config = config.model_copy(update={"models": {**config.models, "large": large}})
    args = llm_api_args(config, "large")
    assert args["kv_cache_config"]["max_tokens"] == 80_000
    assert args["max_batch_size"] == 40  # 34.8 requests, rounded up to a multiple of 8
    assert args["max_num_tokens"] == 2_048  # 2,000 + 40, up to a power of two


def test_a_plan_that_does_not_fit_is_a_clear_error(tmp_path: Path) -> None:
    config = project_config(tmp_path, TARGETS[1])
    large = config.models["large"].model_copy(update={"weights_gb": 100.0})
    config = config.model_copy(update={"models": {**config.models, "large": large}})
    with pytest.raises(ValueError, match="nothing is left for the KV cache"):
        fill_repository(config, "large")


def test_pool_settings_reach_the_model_yaml(tmp_path: Path) -> None:
    config = project_config(tmp_path, TARGETS[1])
    pool = config.pools["small"]
    engine = pool.engine.model_copy(update={"enable_chunked_prefill": False, "enable_prefix_caching": False})
    config = config.model_copy(update={"pools": {**config.pools, "small": pool.model_copy(update={"engine": engine})}})
    args = llm_api_args(config, "small")
    assert args["enable_chunked_prefill"] is False
    assert args["kv_cache_config"]["enable_block_reuse"] is False
    assert "context_chunking_policy" not in args["scheduler_config"]


def test_legacy_backend_config_and_build_script(tmp_path: Path) -> None:
    config = project_config(tmp_path, TARGETS[2])
    repo = fill_repository(config, "small")
    engine = parse_model_config(repo / "tensorrt_llm" / "config.pbtxt")
    plan = pool_plan(config, "small")
    params = {key: value.string_value for key, value in engine.parameters.items()}
    assert engine.backend == "tensorrtllm"
    assert engine.max_batch_size == plan.max_batch_size
    assert engine.model_transaction_policy.decoupled
    assert params["gpt_model_type"] == "inflight_fused_batching"
    assert params["gpt_model_path"] == str((engine_dir(config, "small") / "engine").resolve())
    assert params["enable_kv_cache_reuse"] == "true"
    assert params["enable_chunked_context"] == "true"
    assert params["batch_scheduler_policy"] == "guaranteed_no_evict"
    assert params["max_tokens_in_paged_kv_cache"] == str(plan.kv_tokens_per_copy)
    script = build_script(config, "small", plan)
    for flag in (
        "--kv_cache_type paged",
        "--use_paged_context_fmha enable",
        f"--max_num_tokens {plan.max_num_tokens}",
        f"--max_batch_size {plan.max_batch_size}",
        "--max_input_len 36864",
        "--max_seq_len 36864",
        "--tp_size 1",
    ):
        assert flag in script
    assert script.index("convert_checkpoint.py") < script.index("trtllm-build")


def test_model_yaml_turns_on_the_llguidance_backend(tmp_path: Path) -> None:
    """Guided decoding on the GPU path: the same library, and grammar form, as the CPU engine's."""
    repo = fill_repository(project_config(tmp_path, TARGETS[1]), "large")
    args = yaml.safe_load((repo / "tensorrt_llm" / "model.yaml").read_text())
    assert args["guided_decoding_backend"] == "llguidance" and llm_api_problems(args) == []
