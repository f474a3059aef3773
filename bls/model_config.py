"""Reading a Triton model's `config.pbtxt` (as the JSON Triton hands to `initialize`).

The repository templates carry their settings as `parameters { key: ... value { string_value:
... } }`; these helpers turn them into typed values once, at load, with errors that name the
parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bls.cpp_backend_tensors import CppBackendDialect
from bls.engine_dialect import EngineDialect, SwitchyardDialect
from bls.tokenizer import GenerationTokenIds
from engine.config import EngineConfig

ENGINE_DIALECTS = ("switchyard", "tensorrtllm_cpp")


class ModelConfigError(ValueError):
    """The model's config.pbtxt is missing a parameter or has a wrong value."""


def model_parameters(model_config: Mapping[str, Any]) -> dict[str, str]:
    """`parameters` of a model config as a plain name -> string mapping."""
    raw = model_config.get("parameters") or {}
    return {name: str(value.get("string_value", "")) for name, value in raw.items()}


def require_decoupled(model_config: Mapping[str, Any], decoupled: bool) -> None:
    """Fail at load when the transaction policy is not what the model's code assumes."""
    policy = model_config.get("model_transaction_policy") or {}
    actual = bool(policy.get("decoupled", False))
    if actual != decoupled:
        name = model_config.get("name", "?")
        want = "must be decoupled" if decoupled else "must not be decoupled"
        raise ModelConfigError(f"model {name!r} {want}: fix model_transaction_policy in config.pbtxt")


def _get(params: Mapping[str, str], name: str) -> str:
    value = params.get(name, "")
    if not value:
        raise ModelConfigError(f"config.pbtxt parameter {name!r} is missing or empty")
    return value


def param_int(params: Mapping[str, str], name: str) -> int:
    value = _get(params, name)
    try:
        return int(value)
    except ValueError:
        raise ModelConfigError(f"parameter {name!r} must be an integer, got {value!r}") from None


def param_float(params: Mapping[str, str], name: str) -> float:
    value = _get(params, name)
    try:
        return float(value)
    except ValueError:
        raise ModelConfigError(f"parameter {name!r} must be a number, got {value!r}") from None


def param_bool(params: Mapping[str, str], name: str, *, default: bool | None = None) -> bool:
    """A true/false parameter; `default` when it is absent (None: it must be there)."""
    if default is not None and name not in params:
        return default
    value = _get(params, name).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ModelConfigError(f"parameter {name!r} must be true or false, got {value!r}")


def param_str(params: Mapping[str, str], name: str) -> str:
    return _get(params, name)


def param_path(params: Mapping[str, str], name: str) -> Path:
    path = Path(_get(params, name))
    if not path.exists():
        raise ModelConfigError(f"parameter {name!r} names {path}, which does not exist")
    return path


def engine_config_from_parameters(params: Mapping[str, str]) -> EngineConfig:
    """The EngineConfig the `cpu_engine` template carries (filled by build_engines/repository.py)."""
    return EngineConfig(
        kv_capacity_tokens=param_int(params, "kv_capacity_tokens"),
        block_size=param_int(params, "block_size"),
        max_num_seqs=param_int(params, "max_num_seqs"),
        max_num_batched_tokens=param_int(params, "max_num_batched_tokens"),
        max_step_cost=param_float(params, "max_step_cost"),
        enable_chunked_prefill=param_bool(params, "enable_chunked_prefill"),
        enable_prefix_caching=param_bool(params, "enable_prefix_caching"),
        max_bulk_seqs_beside_interactive=(
            int(cap) if (cap := params.get("max_bulk_seqs_beside_interactive", "")) else None
        ),
        max_bulk_cost_beside_interactive=(
            float(cost) if (cost := params.get("max_bulk_cost_beside_interactive", "")) else None
        ),
        long_prefill_tokens=int(cap) if (cap := params.get("long_prefill_tokens", "")) else None,
        express_max_tokens=int(cap) if (cap := params.get("express_max_tokens", "")) else None,
    )


def engine_dialect_from_parameters(params: Mapping[str, str]) -> EngineDialect:
    """The tensors `llm` speaks to its engine model (`engine_dialect`, bls/engine_dialect.py).

    The C++ backend needs the model's EOS ids in every request: they are read from the
    checkpoint in `model_dir`.
    """
    name = param_str(params, "engine_dialect")
    if name == "switchyard":
        return SwitchyardDialect()
    if name == "tensorrtllm_cpp":
        model_dir = param_path(params, "model_dir")
        try:
            ids = GenerationTokenIds.from_model_dir(model_dir)
        except ValueError as exc:
            raise ModelConfigError(str(exc)) from None
        if not ids.eos_token_ids:
            raise ModelConfigError(
                f"engine_dialect tensorrtllm_cpp needs the model's eos_token_id, and neither "
                f"generation_config.json nor config.json in {model_dir} has one"
            )
        return CppBackendDialect(ids.eos_token_ids, ids.pad_token_id)
    raise ModelConfigError(f"parameter 'engine_dialect' must be one of {', '.join(ENGINE_DIALECTS)}, got {name!r}")
