"""LEGACY: the TensorRT-engine GPU path, kept only while the pinned TensorRT-LLM release still
has it (`PINNED_RELEASE.has_tensorrt_engine_backend` in build_engines/trtllm_pin.py). Upstream
removed `trtllm-build`, the per-model `convert_checkpoint.py` examples and the C++ `tensorrtllm`
Triton backend in July 2026; the GPU path is the LLM API (build_engines/llm_api_args.py). This is
for fleets that stay on the pinned release's engines (`switchyard build --target trtllm
--engine legacy`); every entry point here refuses once the pin moves past it.

    HF checkpoint (weights_uri) ──convert_checkpoint.py──▶ var/engines/<model>/tp<N>/checkpoint
                                ──trtllm-build──────────▶ var/engines/<model>/tp<N>/engine
    var/model_repository/<pool>/tensorrt_llm/config.pbtxt   gpt_model_path = that engine

The engine is compiled for its limits: paged KV, paged context FMHA (so chunked context and KV
reuse work), `max_num_tokens`, `max_input_len`/`max_seq_len` = the model's context, and tensor
parallel = gpus_per_copy; the sizes are the plan's, as on the LLM API path. Building needs a GPU
and the pinned release's examples folder (`TRTLLM_EXAMPLES`, in its NGC image under
/app/tensorrt_llm/examples); the script is written on any machine and run where those are.
`llm` talks to this backend in its own tensors (bls/cpp_backend_tensors.py).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from build_engines.sizing import Plan
from build_engines.trtllm_pin import PINNED_RELEASE, TrtllmRelease, require_tensorrt_engine_backend
from config.settings import SwitchyardConfig

# The C++ backend's scheduler: admit a request only when its whole reply fits in the KV cache.
BATCH_SCHEDULER_POLICY = "guaranteed_no_evict"
_CONVERT_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "fp8": "float16"}


def engine_dir(config: SwitchyardConfig, model_id: str) -> Path:
    """Where the built TensorRT engine of `model_id` lives (per tensor-parallel size)."""
    gpus = config.models[model_id].gpus_per_copy
    return config.var_path / "engines" / model_id / f"tp{gpus}"


def legacy_values(
    config: SwitchyardConfig, pool_id: str, plan: Plan, release: TrtllmRelease = PINNED_RELEASE
) -> dict[str, str]:
    """The C++ backend's config.pbtxt placeholders (model_repository/tensorrt_llm_cpp).
    Raises LegacyEngineUnavailable when `release` has no such backend."""
    require_tensorrt_engine_backend(release)
    pool = config.pools[pool_id]
    return {
        "engine_dir": str((engine_dir(config, pool.model_id) / "engine").resolve()),
        "triton_max_batch_size": str(plan.max_batch_size),
        "max_tokens_in_paged_kv_cache": str(plan.kv_tokens_per_copy),
        "kv_cache_free_gpu_mem_fraction": repr(config.gpu.kv_memory_fraction),
        "enable_kv_cache_reuse": "true" if pool.engine.enable_prefix_caching else "false",
        "enable_chunked_context": "true" if pool.engine.enable_chunked_prefill else "false",
        "batch_scheduler_policy": BATCH_SCHEDULER_POLICY,
    }


def build_script(config: SwitchyardConfig, model_id: str, plan: Plan, release: TrtllmRelease = PINNED_RELEASE) -> str:
    """A bash script that converts the checkpoint and builds the engine (idempotent: an engine
    folder with a config.json is left alone). Raises LegacyEngineUnavailable when `release` has
    no `trtllm-build`."""
    require_tensorrt_engine_backend(release)
    model = config.models[model_id]
    out = engine_dir(config, model_id).resolve()
    checkpoint, engine = out / "checkpoint", out / "engine"
    convert = [
        "python3",
        "${TRTLLM_EXAMPLES}/models/core/llama/convert_checkpoint.py",
        "--model_dir",
        str(config.model_dir(model_id).resolve()),
        "--output_dir",
        str(checkpoint),
        "--dtype",
        _CONVERT_DTYPES[model.dtype],
        "--tp_size",
        str(model.gpus_per_copy),
    ]
    build = [
        "trtllm-build",
        "--checkpoint_dir",
        str(checkpoint),
        "--output_dir",
        str(engine),
        "--gemm_plugin",
        "auto",
        "--gpt_attention_plugin",
        "auto",
        "--remove_input_padding",
        "enable",
        "--kv_cache_type",
        "paged",
        "--use_paged_context_fmha",
        "enable",
        "--max_batch_size",
        str(plan.max_batch_size),
        "--max_num_tokens",
        str(plan.max_num_tokens),
        "--max_input_len",
        str(model.max_context_tokens),
        "--max_seq_len",
        str(model.max_context_tokens),
        "--workers",
        str(model.gpus_per_copy),
    ]
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            f"# {model_id}: LEGACY TensorRT engine for the C++ backend, TensorRT-LLM {release.version} only",
            "# (upstream removed TensorRT engines in July 2026; the GPU path is the LLM API).",
            "# Written by `switchyard build --target trtllm --engine legacy`; run it on a GPU host,",
            "# in the pinned release's image.",
            "set -euo pipefail",
            ': "${TRTLLM_EXAMPLES:=/app/tensorrt_llm/examples}"',
            f"if [ -f {shlex.quote(str(engine / 'config.json'))} ]; then",
            f'  echo "engine of {model_id} already built: {engine}"; exit 0',
            "fi",
            _command(convert),
            _command(build),
            f"rm -rf {shlex.quote(str(checkpoint))}",
            "",
        ]
    )


def write_build_script(
    config: SwitchyardConfig, model_id: str, plan: Plan, release: TrtllmRelease = PINNED_RELEASE
) -> Path:
    script = build_script(config, model_id, plan, release)
    path = engine_dir(config, model_id) / "build.sh"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)
    return path


def _command(argv: list[str]) -> str:
    """One command, one argument pair per line; `${TRTLLM_EXAMPLES}` stays expandable."""
    words = [word if word.startswith("${") else shlex.quote(word) for word in argv]
    lines, current = [], words[0]
    for word in words[1:]:
        if word.startswith("--"):
            lines.append(current)
            current = "  " + word
        else:
            current += " " + word
    lines.append(current)
    return " \\\n".join(lines)
