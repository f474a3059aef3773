"""The generated `model.yaml` of the `tensorrt_llm` model, read back by its Triton shell.

tensorrt_llm/model.yaml      LLM(**args): only the LLM API's own keys (written by
                             build_engines/llm_api_args.py, checked against the pin)
tensorrt_llm/config.pbtxt    Switchyard's figures: the plan's KV tokens, stream pacing
<model>/config.json          the checkpoint's vocabulary, context and end-of-sequence id
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from bls.model_config import ModelConfigError, param_int
from trtllm.engine_loop import EngineLimits

MODEL_YAML = "model.yaml"


def load_llm_args(path: Path) -> dict[str, Any]:
    """The keyword arguments for `tensorrt_llm.LLM` from a model.yaml."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ModelConfigError(f"cannot read the LLM arguments in {path}: {exc}") from exc
    if not isinstance(raw, dict) or "model" not in raw:
        raise ModelConfigError(f"{path} must be a mapping with at least `model`")
    return raw


def engine_limits(llm_args: Mapping[str, Any], params: Mapping[str, str]) -> EngineLimits:
    """What the engine loop checks requests against, from the LLM's arguments and the model's
    checkpoint (vocabulary), with the plan's KV figures from config.pbtxt."""
    checkpoint = _checkpoint_config(Path(str(llm_args["model"])))
    kv_cache = llm_args.get("kv_cache_config") or {}
    return EngineLimits(
        vocab_size=int(checkpoint["vocab_size"]),
        max_seq_len=int(llm_args.get("max_seq_len") or checkpoint["max_position_embeddings"]),
        max_batch_size=int(llm_args.get("max_batch_size") or param_int(params, "max_batch_size")),
        kv_tokens=int(kv_cache.get("max_tokens") or param_int(params, "planned_kv_tokens")),
        tokens_per_block=int(kv_cache.get("tokens_per_block") or param_int(params, "tokens_per_block")),
        end_id=_end_id(checkpoint),
    )


def _checkpoint_config(model_dir: Path) -> dict[str, Any]:
    """The HF checkpoint's config.json (any architecture TensorRT-LLM loads has these keys)."""
    path = model_dir / "config.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"cannot read the checkpoint's config {path}: {exc}") from exc
    missing = [key for key in ("vocab_size", "max_position_embeddings", "eos_token_id") if key not in raw]
    if missing:
        raise ModelConfigError(f"{path} has no {', '.join(missing)}")
    return dict(raw)


def _end_id(checkpoint: Mapping[str, Any]) -> int:
    """The end-of-sequence id (HF configs may list several; the first is the one generation uses)."""
    eos = checkpoint["eos_token_id"]
    return int(eos[0] if isinstance(eos, list) else eos)
