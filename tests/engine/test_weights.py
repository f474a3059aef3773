"""Loading HF Llama safetensors checkpoints into transposed, fused float32 arrays."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from build_engines.checkpoint import llama_config_dict, random_llama_tensors, write_checkpoint
from engine.config import ModelConfig
from engine.weights import F32, LlamaWeights, load_llama_weights, read_safetensors


def tiny_config_dict(**overrides: object) -> dict[str, object]:
    raw = llama_config_dict(
        vocab_size=50,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return {**raw, **overrides}


def write_tiny(tmp_path: Path, **overrides: object) -> tuple[ModelConfig, dict[str, F32]]:
    raw = tiny_config_dict(**overrides)
    config = ModelConfig.from_dict(raw)
    tensors = random_llama_tensors(config, seed=1)
    write_checkpoint(raw, tensors, tmp_path)
    return config, tensors


def assert_matches_tensors(weights: LlamaWeights, tensors: dict[str, F32]) -> None:
    layer = weights.layers[1]
    p = "model.layers.1."
    expected_qkv = np.concatenate([tensors[p + f"self_attn.{n}_proj.weight"].T for n in ("q", "k", "v")], axis=1)
    np.testing.assert_array_equal(layer.qkv_proj, expected_qkv)
    np.testing.assert_array_equal(layer.o_proj, tensors[p + "self_attn.o_proj.weight"].T)
    np.testing.assert_array_equal(
        layer.gate_up_proj,
        np.concatenate([tensors[p + "mlp.gate_proj.weight"].T, tensors[p + "mlp.up_proj.weight"].T], axis=1),
    )
    np.testing.assert_array_equal(layer.down_proj, tensors[p + "mlp.down_proj.weight"].T)
    np.testing.assert_array_equal(layer.input_layernorm, tensors[p + "input_layernorm.weight"])
    np.testing.assert_array_equal(layer.post_attention_layernorm, tensors[p + "post_attention_layernorm.weight"])
    np.testing.assert_array_equal(weights.embed_tokens, tensors["model.embed_tokens.weight"])
    np.testing.assert_array_equal(weights.norm, tensors["model.norm.weight"])
    for array in (layer.qkv_proj, layer.o_proj, weights.lm_head):
        assert array.dtype == np.float32 and array.flags.c_contiguous


def test_round_trip_single_file(tmp_path: Path) -> None:
    config, tensors = write_tiny(tmp_path)
    weights = load_llama_weights(tmp_path)
    assert weights.config == config and len(weights.layers) == 2
    assert_matches_tensors(weights, tensors)
    np.testing.assert_array_equal(weights.lm_head, tensors["lm_head.weight"].T)


def test_tied_embeddings_reuse_the_embedding_matrix(tmp_path: Path) -> None:
    _, tensors = write_tiny(tmp_path, tie_word_embeddings=True)
    assert "lm_head.weight" not in tensors
    weights = load_llama_weights(tmp_path)
    np.testing.assert_array_equal(weights.lm_head, tensors["model.embed_tokens.weight"].T)


def test_sharded_checkpoint_with_index(tmp_path: Path) -> None:
    raw = tiny_config_dict()
    config = ModelConfig.from_dict(raw)
    tensors = random_llama_tensors(config, seed=2)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, shard_names in shards.items():
        save_file({n: tensors[n] for n in shard_names}, str(tmp_path / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in shard_names})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert_matches_tensors(load_llama_weights(tmp_path), tensors)


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    raw = tiny_config_dict()
    tensors = random_llama_tensors(ModelConfig.from_dict(raw), seed=3)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    write_checkpoint(raw, tensors, tmp_path)
    with pytest.raises(ValueError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"):
        load_llama_weights(tmp_path)


def test_shape_mismatch_is_named(tmp_path: Path) -> None:
    raw = tiny_config_dict()
    tensors = random_llama_tensors(ModelConfig.from_dict(raw), seed=4)
    tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((16, 16), np.float32)
    write_checkpoint(raw, tensors, tmp_path)
    with pytest.raises(ValueError, match=r"k_proj\.weight' has shape \(16, 16\), config expects \(8, 16\)"):
        load_llama_weights(tmp_path)


def test_no_checkpoint_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(tiny_config_dict()))
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors"):
        load_llama_weights(tmp_path)


def test_half_precision_tensors_become_float32(tmp_path: Path) -> None:
    """F16 through the safetensors library; BF16 (which numpy lacks) through a hand-made file."""
    values = np.array([[1.0, -2.5], [0.15625, 32768.0]], np.float32)
    save_file({"h": values.astype(np.float16)}, str(tmp_path / "f16.safetensors"))
    np.testing.assert_array_equal(read_safetensors(tmp_path / "f16.safetensors")["h"], values)

    bf16 = (values.view(np.uint32) >> 16).astype("<u2").tobytes()  # these values are exact in bf16
    header = json.dumps({"b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, len(bf16)]}}).encode()
    (tmp_path / "bf16.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bf16)
    loaded = read_safetensors(tmp_path / "bf16.safetensors")["b"]
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, values)


def test_unsupported_dtype_is_refused(tmp_path: Path) -> None:
    save_file({"i": np.arange(4, dtype=np.int32)}, str(tmp_path / "i.safetensors"))
    with pytest.raises(ValueError, match="dtype I32 is not supported"):
        read_safetensors(tmp_path / "i.safetensors")
