"""Load a Hugging Face Llama checkpoint (safetensors) into float32 numpy arrays ready for `x @ W`.

HF stores a linear layer's weight as [out_features, in_features] for `y = x @ W.T`; we transpose
once at load so every forward matmul reads a C-contiguous [in, out] matrix. The three attention
projections are fused into one [hidden, (heads + 2 * kv_heads) * head_dim] matrix and the two
MLP input projections into one [hidden, 2 * intermediate] matrix, so a layer runs two big
matmuls over the whole step's tokens instead of five small ones.

Safetensors is read with a small reader of our own rather than `safetensors.numpy`, because
numpy has no bfloat16 and most published Llama checkpoints are stored in it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from engine.config import ModelConfig

F32 = npt.NDArray[np.float32]

SINGLE_FILE = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"


@dataclass(frozen=True, slots=True)
class LayerWeights:
    """One decoder layer, transposed for `x @ W` and fused (see the module docstring)."""

    input_layernorm: F32  # [hidden]
    qkv_proj: F32  # [hidden, (heads + 2 * kv_heads) * head_dim]: q columns, then k, then v
    o_proj: F32  # [heads * head_dim, hidden]
    post_attention_layernorm: F32  # [hidden]
    gate_up_proj: F32  # [hidden, 2 * intermediate]: gate columns, then up
    down_proj: F32  # [intermediate, hidden]


@dataclass(frozen=True, slots=True)
class LlamaWeights:
    """Every parameter of a Llama model, as float32 numpy arrays."""

    config: ModelConfig
    embed_tokens: F32  # [vocab, hidden]
    layers: tuple[LayerWeights, ...]
    norm: F32  # [hidden]
    lm_head: F32  # [hidden, vocab]


def load_llama_weights(model_dir: Path, config: ModelConfig | None = None) -> LlamaWeights:
    """Read the checkpoint in `model_dir` (single file or sharded with an index).

    Raises FileNotFoundError when there is no safetensors checkpoint, and ValueError naming the
    tensor when one is missing or has the wrong shape.
    """
    config = config or ModelConfig.from_pretrained(model_dir)
    return llama_weights_from_tensors(config, read_checkpoint_tensors(model_dir))


def read_checkpoint_tensors(model_dir: Path) -> dict[str, F32]:
    """Every tensor of a single-file or sharded safetensors checkpoint, as float32, by HF name."""
    index_path = model_dir / SHARD_INDEX
    if index_path.is_file():
        weight_map = json.loads(index_path.read_text()).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index_path}: no 'weight_map' object")
        tensors: dict[str, F32] = {}
        for shard in sorted(set(weight_map.values())):
            tensors.update(read_safetensors(model_dir / str(shard)))
        missing = sorted(name for name in weight_map if name not in tensors)
        if missing:
            raise ValueError(f"{index_path}: tensors listed but absent from their shards: {missing[:5]}")
        return tensors
    single = model_dir / SINGLE_FILE
    if single.is_file():
        return read_safetensors(single)
    raise FileNotFoundError(f"{model_dir}: neither {SINGLE_FILE} nor {SHARD_INDEX} found")


def read_safetensors(path: Path) -> dict[str, F32]:
    """Parse one `.safetensors` file (8-byte header length, JSON header, raw little-endian data).

    F32, F16, BF16 and F64 tensors are converted to float32; other dtypes are refused.
    """
    raw = path.read_bytes()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short to be a safetensors file")
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    data = memoryview(raw)[8 + header_len :]
    tensors: dict[str, F32] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = _to_float32(data[begin:end], str(info["dtype"]), tuple(info["shape"]), name)
    return tensors


def _to_float32(buffer: memoryview, dtype: str, shape: tuple[int, ...], name: str) -> F32:
    if dtype == "BF16":
        # bfloat16 is the top half of a float32: widen the bits and reinterpret.
        bits = np.frombuffer(buffer, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    numpy_dtypes = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}
    if dtype not in numpy_dtypes:
        raise ValueError(f"tensor {name!r}: dtype {dtype} is not supported (F32, F16, BF16, F64)")
    return np.frombuffer(buffer, dtype=numpy_dtypes[dtype]).astype(np.float32).reshape(shape)


def llama_weights_from_tensors(config: ModelConfig, tensors: Mapping[str, F32]) -> LlamaWeights:
    """Check names and shapes of HF-named tensors against `config`, then transpose and fuse."""
    hidden, inter, head_dim = config.hidden_size, config.intermediate_size, config.head_dim
    q_out, kv_out = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim

    def take(name: str, shape: tuple[int, ...]) -> F32:
        if name not in tensors:
            raise ValueError(f"checkpoint is missing tensor {name!r}")
        array = np.asarray(tensors[name], dtype=np.float32)
        if array.shape != shape:
            raise ValueError(f"tensor {name!r} has shape {array.shape}, config expects {shape}")
        return array

    def linear(name: str, out_features: int, in_features: int) -> F32:
        return take(name, (out_features, in_features)).T

    layers = []
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        qkv = (
            linear(p + "self_attn.q_proj.weight", q_out, hidden),
            linear(p + "self_attn.k_proj.weight", kv_out, hidden),
            linear(p + "self_attn.v_proj.weight", kv_out, hidden),
        )
        gate_up = (
            linear(p + "mlp.gate_proj.weight", inter, hidden),
            linear(p + "mlp.up_proj.weight", inter, hidden),
        )
        layers.append(
            LayerWeights(
                input_layernorm=_contiguous(take(p + "input_layernorm.weight", (hidden,))),
                qkv_proj=_concat_columns(qkv),
                o_proj=_contiguous(linear(p + "self_attn.o_proj.weight", hidden, q_out)),
                post_attention_layernorm=_contiguous(take(p + "post_attention_layernorm.weight", (hidden,))),
                gate_up_proj=_concat_columns(gate_up),
                down_proj=_contiguous(linear(p + "mlp.down_proj.weight", hidden, inter)),
            )
        )
    embed = _contiguous(take("model.embed_tokens.weight", (config.vocab_size, hidden)))
    if config.tie_word_embeddings and "lm_head.weight" not in tensors:
        lm_head = _contiguous(embed.T)
    else:
        lm_head = _contiguous(linear("lm_head.weight", config.vocab_size, hidden))
    return LlamaWeights(
        config=config,
        embed_tokens=embed,
        layers=tuple(layers),
        norm=_contiguous(take("model.norm.weight", (hidden,))),
        lm_head=lm_head,
    )


def _concat_columns(parts: Iterable[F32]) -> F32:
    return np.ascontiguousarray(np.concatenate(list(parts), axis=1), dtype=np.float32)


def _contiguous(array: F32) -> F32:
    return np.ascontiguousarray(array, dtype=np.float32)
