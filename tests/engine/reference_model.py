"""An obviously-correct Llama forward pass for tests: no KV cache, no fusing, no tiling.

It recomputes the whole sequence for every call, in float64, straight from the HF-named
tensors and following HF transformers' `modeling_llama` line by line (rotate_half RoPE with
float32 angles, repeat_kv, full causal mask, softmax with max subtraction). It shares no code
with `engine/model.py`, so agreement between the two means the paged, chunked, fused version
computes the same function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.config import ModelConfig

F64 = npt.NDArray[np.float64]


def reference_logits(config: ModelConfig, tensors: Mapping[str, npt.NDArray[Any]], token_ids: Sequence[int]) -> F64:
    """Logits [len(token_ids), vocab] for every position of the sequence."""
    w = {name: np.asarray(t, dtype=np.float64) for name, t in tensors.items()}
    heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    seq_len = len(token_ids)

    cos, sin = _rotary(config, seq_len)
    mask = np.triu(np.full((seq_len, seq_len), -np.inf), k=1)
    x = w["model.embed_tokens.weight"][np.asarray(token_ids)]
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        h = _rms_norm(x, w[p + "input_layernorm.weight"], config.rms_norm_eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(seq_len, heads, head_dim).transpose(1, 0, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(seq_len, kv_heads, head_dim).transpose(1, 0, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(seq_len, kv_heads, head_dim).transpose(1, 0, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = np.repeat(k, heads // kv_heads, axis=0)  # HF repeat_kv: head h reads kv head h // n_rep
        v = np.repeat(v, heads // kv_heads, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(head_dim) + mask
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        attn = (probs @ v).transpose(1, 0, 2).reshape(seq_len, heads * head_dim)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].T

        h = _rms_norm(x, w[p + "post_attention_layernorm.weight"], config.rms_norm_eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + ((gate / (1.0 + np.exp(-gate))) * up) @ w[p + "mlp.down_proj.weight"].T

    x = _rms_norm(x, w["model.norm.weight"], config.rms_norm_eps)
    lm_head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    logits: F64 = x @ lm_head.T
    return logits


def reference_greedy(
    config: ModelConfig, tensors: Mapping[str, npt.NDArray[Any]], prompt: Sequence[int], num_tokens: int
) -> list[int]:
    """Greedy continuation, recomputing the whole sequence for every new token."""
    tokens = list(prompt)
    for _ in range(num_tokens):
        tokens.append(int(np.argmax(reference_logits(config, tensors, tokens)[-1])))
    return tokens[len(prompt) :]


def _rotary(config: ModelConfig, seq_len: int) -> tuple[F64, F64]:
    """HF LlamaRotaryEmbedding: float32 inv_freq and angles, emb = cat(freqs, freqs)."""
    dim = config.head_dim
    inv_freq = 1.0 / (np.float32(config.rope_theta) ** (np.arange(0, dim, 2).astype(np.float32) / np.float32(dim)))
    freqs = np.arange(seq_len, dtype=np.float32)[:, None] * inv_freq.astype(np.float32)[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1).astype(np.float32)
    return np.cos(emb).astype(np.float64), np.sin(emb).astype(np.float64)


def _rotate_half(x: F64) -> F64:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def _rms_norm(x: F64, weight: F64, eps: float) -> F64:
    variance = np.mean(x * x, axis=-1, keepdims=True)
    normed: F64 = weight * (x / np.sqrt(variance + eps))
    return normed
