"""Write a deterministic random-weight Llama checkpoint in Hugging Face format.

The project ships no weights and cannot download any, so `switchyard build` makes its own:
the same seed and architecture always give byte-identical files, which is what lets two
servers built on different machines produce the same tokens (failover resumes a reply
token-for-token on another server).

Initialisation: linear layers draw from N(0, 1/fan_in) and embeddings from N(0, 1). For a
real model (hidden 4096) 1/sqrt(fan_in) is ~0.016, close to HF's 0.02; for our hidden-64
models a flat 0.02 would leave every attention score near zero and every logit near equal,
so greedy replies would not depend on the prompt. Norm weights are 1 plus a little noise, so
a forward pass that forgot to apply them would be caught by the reference tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from engine.config import ModelConfig
from engine.weights import F32

BOS_TOKEN_ID = 1
EOS_TOKEN_ID = 2
PAD_TOKEN_ID = 0


def llama_config_dict(
    *,
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    max_position_embeddings: int,
    rms_norm_eps: float = 1e-5,
    rope_theta: float = 10000.0,
) -> dict[str, Any]:
    """An HF `config.json` for LlamaForCausalLM with every field transformers reads."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "head_dim": hidden_size // num_attention_heads,
        "hidden_act": "silu",
        "max_position_embeddings": max_position_embeddings,
        "initializer_range": 0.02,
        "rms_norm_eps": rms_norm_eps,
        "rope_theta": rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "use_cache": True,
        "bos_token_id": BOS_TOKEN_ID,
        "eos_token_id": EOS_TOKEN_ID,
        "pad_token_id": PAD_TOKEN_ID,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }


def random_llama_tensors(config: ModelConfig, seed: int) -> dict[str, F32]:
    """HF-named float32 tensors for `config`, drawn in a fixed order from one seeded RNG."""
    rng = np.random.default_rng(seed)
    hidden, inter, head_dim = config.hidden_size, config.intermediate_size, config.head_dim
    q_out, kv_out = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim

    def normal(shape: tuple[int, ...], std: float) -> F32:
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def linear(out_features: int, in_features: int) -> F32:
        return normal((out_features, in_features), in_features**-0.5)

    def norm() -> F32:
        return (np.float32(1.0) + normal((hidden,), 0.1)).astype(np.float32)

    tensors = {"model.embed_tokens.weight": normal((config.vocab_size, hidden), 1.0)}
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = norm()
        tensors[p + "self_attn.q_proj.weight"] = linear(q_out, hidden)
        tensors[p + "self_attn.k_proj.weight"] = linear(kv_out, hidden)
        tensors[p + "self_attn.v_proj.weight"] = linear(kv_out, hidden)
        tensors[p + "self_attn.o_proj.weight"] = linear(hidden, q_out)
        tensors[p + "post_attention_layernorm.weight"] = norm()
        tensors[p + "mlp.gate_proj.weight"] = linear(inter, hidden)
        tensors[p + "mlp.up_proj.weight"] = linear(inter, hidden)
        tensors[p + "mlp.down_proj.weight"] = linear(hidden, inter)
    tensors["model.norm.weight"] = norm()
    if not config.tie_word_embeddings:
        tensors["lm_head.weight"] = linear(config.vocab_size, hidden)
    return tensors


def write_checkpoint(config_dict: dict[str, Any], tensors: dict[str, F32], out_dir: Path) -> None:
    """Write config.json, model.safetensors and generation_config.json into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_json(out_dir / "config.json", config_dict)
    # transformers refuses safetensors files whose metadata lacks format "pt".
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    _write_json(
        out_dir / "generation_config.json",
        {
            "bos_token_id": config_dict["bos_token_id"],
            "eos_token_id": config_dict["eos_token_id"],
            "pad_token_id": config_dict["pad_token_id"],
            "do_sample": False,
        },
    )


def write_random_checkpoint(config_dict: dict[str, Any], seed: int, out_dir: Path) -> None:
    """A whole random-weight checkpoint for the architecture in `config_dict`."""
    tensors = random_llama_tensors(ModelConfig.from_dict(config_dict), seed)
    write_checkpoint(config_dict, tensors, out_dir)


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
