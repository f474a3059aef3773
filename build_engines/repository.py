"""Fill the Triton model repository templates for one pool.

    model_repository/<model>/config.pbtxt   ${placeholders}
    model_repository/<model>/1/model.py      thin shells, copied as they are
                     │  values from switchyard.yaml (the pool's engine, the model's weights)
                     ▼
    var/model_repository/<pool_id>/<model>/...

The stage models (`llm`, `preprocessing`, `postprocessing`) are the same on every target; the
engine model is the one `serving` in switchyard.yaml names (`EngineModel`):

    serving.target  trtllm_engine   engine model     from template        `llm` speaks
    cpu             -               none: in `llm`   cpu_engine's params  (in memory)
                                    (engine_in_process, the default)
    cpu             -               cpu_engine       cpu_engine           switchyard tensors
    trtllm          llmapi          tensorrt_llm     tensorrt_llm         switchyard tensors
                    (the default)   + model.yaml (build_engines/llm_api_args.py)
    trtllm          legacy          tensorrt_llm     tensorrt_llm_cpp     the C++ backend's
                    (LEGACY: only while the pinned TensorRT-LLM release has TensorRT engines;
                    build_engines/legacy_engine.py, build_engines/trtllm_pin.py)

Every `${name}` must have a value and nothing may look like a placeholder afterwards: a
typo in a template fails here, not as a puzzling default inside a running server. The
repository is written next to its final place and swapped in, so a server never loads a
half-written one.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from build_engines.legacy_engine import legacy_values
from build_engines.llm_api_args import GPU_TOKENS_PER_BLOCK, llm_api_args, pool_plan
from build_engines.trtllm_pin import PINNED_RELEASE, TrtllmRelease
from config.settings import ServingSpec, SwitchyardConfig

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "model_repository"
STAGE_MODELS = ("llm", "preprocessing", "postprocessing")

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_PARAMETER_KEY = re.compile(r'^\s*parameters\s*\{\s*key:\s*"([^"]+)"', re.MULTILINE)
# A reply waiting on the engine holds one llm worker thread (bls/triton_stages.py); threads
# start lazily, so a generous cap costs nothing until it is used.
DEFAULT_MAX_STREAMS = 4096
# Measured on 2 cores, 16 streams: one postprocessing instance or two gave the same
# throughput (the machine, not the instance, is the limit); more instances only cost memory.
# Raise them on many-core hosts through `overrides`.
DEFAULT_PREPROCESSING_INSTANCES = 1
DEFAULT_POSTPROCESSING_INSTANCES = 1


class TemplateError(ValueError):
    """A template names a placeholder nobody fills, or leaves something unfilled."""


@dataclass(frozen=True)
class EngineModel:
    """The engine model behind `llm` on one serving target."""

    template: str  # folder under model_repository/
    name: str  # the model's name in the pool's repository (what `llm` calls)
    dialect: str  # the tensors `llm` speaks to it (bls/engine_dialect.py)


CPU_ENGINE = EngineModel("cpu_engine", "cpu_engine", "switchyard")
LLM_API_ENGINE = EngineModel("tensorrt_llm", "tensorrt_llm", "switchyard")
LEGACY_ENGINE = EngineModel("tensorrt_llm_cpp", "tensorrt_llm", "tensorrtllm_cpp")


def engine_model(serving: ServingSpec) -> EngineModel:
    if serving.target == "cpu":
        return CPU_ENGINE
    return LLM_API_ENGINE if serving.trtllm_engine == "llmapi" else LEGACY_ENGINE


def fill_template(text: str, values: Mapping[str, str], source: str = "template") -> str:
    """Replace every `${name}` in `text`; unknown names and stray `$` are errors."""
    unknown = sorted({m.group(1) for m in _PLACEHOLDER.finditer(text)} - set(values))
    if unknown:
        raise TemplateError(f"{source}: no value for placeholder(s) {', '.join(unknown)}")
    for line in text.splitlines():
        if "$" in _PLACEHOLDER.sub("", line.split("#", 1)[0]):
            raise TemplateError(f"{source}: malformed placeholder in {line.strip()!r}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def repository_values(
    config: SwitchyardConfig, pool_id: str, engine_model: EngineModel, release: TrtllmRelease = PINNED_RELEASE
) -> dict[str, str]:
    """The placeholder values for one pool, all as strings (`release`: the TensorRT-LLM the GPU
    engine models are written for; the legacy one refuses a release without its backend)."""
    if pool_id not in config.pools:
        raise KeyError(f"unknown pool {pool_id!r}; switchyard.yaml has {sorted(config.pools)}")
    pool = config.pools[pool_id]
    engine = pool.engine
    values = {
        "model_dir": str(config.model_dir(pool.model_id).resolve()),
        "engine_model_name": engine_model.name,
        "engine_dialect": engine_model.dialect,
        "kv_capacity_tokens": str(engine.kv_capacity_tokens),
        "block_size": str(engine.block_size),
        "max_num_seqs": str(engine.max_num_seqs),
        "max_num_batched_tokens": str(engine.max_num_batched_tokens),
        "max_step_cost": repr(float(engine.max_step_cost)),
        "enable_chunked_prefill": "true" if engine.enable_chunked_prefill else "false",
        "enable_prefix_caching": "true" if engine.enable_prefix_caching else "false",
        "max_bulk_seqs_beside_interactive": (
            "" if engine.max_bulk_seqs_beside_interactive is None else str(engine.max_bulk_seqs_beside_interactive)
        ),
        "max_bulk_cost_beside_interactive": (
            "" if engine.max_bulk_cost_beside_interactive is None else repr(engine.max_bulk_cost_beside_interactive)
        ),
        "long_prefill_tokens": "" if engine.long_prefill_tokens is None else str(engine.long_prefill_tokens),
        "express_max_tokens": "" if engine.express_max_tokens is None else str(engine.express_max_tokens),
        "stream_interval_ms": str(pool.stream_interval_ms),
        "max_stream_responses_per_s": str(pool.max_stream_responses_per_s),
        "postprocess_in_process": "true" if pool.postprocess_in_process else "false",
        "max_streams": str(DEFAULT_MAX_STREAMS),
        "preprocessing_instances": str(DEFAULT_PREPROCESSING_INSTANCES),
        "postprocessing_instances": str(DEFAULT_POSTPROCESSING_INSTANCES),
    }
    if engine_model != CPU_ENGINE:
        values.update(_gpu_values(config, pool_id, engine_model, release))
    return values


def _gpu_values(
    config: SwitchyardConfig, pool_id: str, engine_model: EngineModel, release: TrtllmRelease
) -> dict[str, str]:
    """The GPU engine models' own placeholders (the plan's sizes)."""
    plan = pool_plan(config, pool_id)
    values = {
        "planned_kv_tokens": str(plan.kv_tokens_per_copy),
        "gpu_tokens_per_block": str(GPU_TOKENS_PER_BLOCK),
        "max_batch_size": str(plan.max_batch_size),
    }
    if engine_model == LEGACY_ENGINE:
        values.update(legacy_values(config, pool_id, plan, release))
    return values


def fill_repository(
    config: SwitchyardConfig,
    pool_id: str,
    *,
    overrides: Mapping[str, str] | None = None,
    templates_dir: Path = TEMPLATES_DIR,
    release: TrtllmRelease = PINNED_RELEASE,
) -> Path:
    """Write the pool's model repository into `config.pool_repository(pool_id)`; return it.

    The engine model is the one `config.serving` names. `overrides` replaces individual values
    (say, instance counts in a benchmark); a key that is not a known placeholder is an error.
    The legacy engine raises LegacyEngineUnavailable when `release` no longer has it.
    """
    engine = engine_model(config.serving)
    values = repository_values(config, pool_id, engine, release)
    for key, value in (overrides or {}).items():
        if key not in values:
            raise TemplateError(f"unknown repository key {key!r}; known: {', '.join(sorted(values))}")
        values[key] = value
    target = config.pool_repository(pool_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}"
    try:
        for model in STAGE_MODELS:
            _fill_model(templates_dir / model, staging / model, values)
        if engine == CPU_ENGINE and config.pools[pool_id].engine_in_process:
            _host_engine_in_llm(templates_dir / engine.template, staging / "llm", values)
        else:
            _fill_model(templates_dir / engine.template, staging / engine.name, values)
        if engine == LLM_API_ENGINE:
            model_yaml = yaml.safe_dump(llm_api_args(config, pool_id), sort_keys=False)
            (staging / engine.name / "model.yaml").write_text(model_yaml)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return target


def _host_engine_in_llm(engine_template: Path, llm: Path, values: Mapping[str, str]) -> None:
    """`llm` runs the engine itself (bls/in_process_engine.py): its config gains the engine
    template's parameters (those it lacks) and `engine_in_process`; no engine model is
    written. The parameters come from the engine's own template, so the two cannot drift."""
    engine_config = engine_template / "config.pbtxt"
    filled = fill_template(engine_config.read_text(), values, str(engine_config))
    llm_config = llm / "config.pbtxt"
    text = llm_config.read_text()
    present = set(_PARAMETER_KEY.findall(text))
    lines = [
        line
        for line in filled.splitlines()
        if (key := _PARAMETER_KEY.search(line)) is not None and key.group(1) not in present
    ]
    lines.append('parameters { key: "engine_in_process", value: { string_value: "true" } }')
    header = f"\n# The engine runs in this model's process: {engine_template.name}'s parameters.\n"
    llm_config.write_text(text.rstrip("\n") + "\n" + header + "\n".join(lines) + "\n")


def _fill_model(template: Path, out: Path, values: Mapping[str, str]) -> None:
    config_path = template / "config.pbtxt"
    if not config_path.is_file():
        raise TemplateError(f"no model template at {template} (config.pbtxt missing)")
    shutil.copytree(template, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "config.pbtxt"))
    (out / "1").mkdir(exist_ok=True)  # Triton wants a version folder, even one a C++ backend leaves empty
    (out / "config.pbtxt").write_text(fill_template(config_path.read_text(), values, str(config_path)))
