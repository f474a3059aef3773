"""ModelConfig refuses checkpoints the numpy forward pass cannot run exactly; EngineConfig
refuses sizes that cannot hold a block."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig, ModelConfig

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "eos_token_id": [2, 7],
}


def test_reads_llama_fields_and_first_eos() -> None:
    config = ModelConfig.from_dict(LLAMA)
    assert (config.head_dim, config.num_key_value_heads, config.eos_token_id) == (16, 2, 2)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"architectures": ["MistralForCausalLM"]}, "architecture"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling"),
        ({"head_dim": 32}, "head_dim"),
    ],
)
def test_refuses_what_it_cannot_run(change: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        ModelConfig.from_dict({**LLAMA, **change})


def test_engine_config_counts_blocks_and_refuses_empty_pools() -> None:
    assert EngineConfig(kv_capacity_tokens=80_000, block_size=16).num_blocks == 5000
    with pytest.raises(ValueError):
        EngineConfig(kv_capacity_tokens=8, block_size=16)
