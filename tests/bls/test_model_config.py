from __future__ import annotations

import pytest

from bls.model_config import (
    ModelConfigError,
    engine_config_from_parameters,
    model_parameters,
    param_bool,
    require_decoupled,
)
from engine.config import EngineConfig


def config(decoupled: bool, **params: str) -> dict[str, object]:
    return {
        "name": "cpu_engine",
        "model_transaction_policy": {"decoupled": decoupled},
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }


def test_engine_config_from_parameters() -> None:
    params = model_parameters(
        config(
            True,
            kv_capacity_tokens="4096",
            block_size="16",
            max_num_seqs="8",
            max_num_batched_tokens="256",
            max_step_cost="1024.0",
            enable_chunked_prefill="true",
            enable_prefix_caching="false",
            long_prefill_tokens="64",
        )
    )
    assert engine_config_from_parameters(params) == EngineConfig(
        kv_capacity_tokens=4096,
        block_size=16,
        max_num_seqs=8,
        max_num_batched_tokens=256,
        max_step_cost=1024.0,
        enable_chunked_prefill=True,
        enable_prefix_caching=False,
        long_prefill_tokens=64,
    )


def test_errors_name_the_parameter() -> None:
    with pytest.raises(ModelConfigError, match="'block_size' is missing"):
        engine_config_from_parameters(model_parameters(config(True, kv_capacity_tokens="1")))
    with pytest.raises(ModelConfigError, match="true or false"):
        param_bool({"x": "maybe"}, "x")


def test_decoupled_policy_is_checked() -> None:
    require_decoupled(config(True), True)
    with pytest.raises(ModelConfigError, match="must be decoupled"):
        require_decoupled(config(False), True)
    with pytest.raises(ModelConfigError, match="must not be decoupled"):
        require_decoupled(config(True), False)
