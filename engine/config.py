"""Configuration of one engine instance (one server's worth of KV and scheduling) and of the
model architecture it runs (read from a Hugging Face `config.json`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The Llama-architecture fields the numpy forward pass needs (HF `config.json` names)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    tie_word_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> ModelConfig:
        arch = raw.get("architectures") or ["LlamaForCausalLM"]
        if not isinstance(arch, list) or "LlamaForCausalLM" not in arch:
            raise ValueError(f"unsupported architecture {arch!r}: only LlamaForCausalLM runs on CPU")
        eos = raw.get("eos_token_id")
        if isinstance(eos, list):  # HF allows several; the first is the canonical one
            eos = eos[0] if eos else None
        heads = int(raw["num_attention_heads"])  # type: ignore[call-overload]
        # Refuse what the numpy forward pass does not implement rather than give wrong logits.
        if raw.get("rope_scaling"):
            raise ValueError(f"unsupported rope_scaling {raw['rope_scaling']!r}: only plain RoPE runs on CPU")
        head_dim = raw.get("head_dim")
        if head_dim is not None and int(head_dim) * heads != int(raw["hidden_size"]):  # type: ignore[call-overload]
            raise ValueError(f"unsupported head_dim {head_dim}: must equal hidden_size / num_attention_heads")
        return cls(
            vocab_size=int(raw["vocab_size"]),  # type: ignore[call-overload]
            hidden_size=int(raw["hidden_size"]),  # type: ignore[call-overload]
            intermediate_size=int(raw["intermediate_size"]),  # type: ignore[call-overload]
            num_hidden_layers=int(raw["num_hidden_layers"]),  # type: ignore[call-overload]
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads", heads)),  # type: ignore[call-overload]
            max_position_embeddings=int(raw["max_position_embeddings"]),  # type: ignore[call-overload]
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),  # type: ignore[arg-type]
            rope_theta=float(raw.get("rope_theta", 10000.0)),  # type: ignore[arg-type]
            bos_token_id=raw.get("bos_token_id"),  # type: ignore[arg-type]
            eos_token_id=eos,  # type: ignore[arg-type]
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        )

    @classmethod
    def from_pretrained(cls, model_dir: Path) -> ModelConfig:
        return cls.from_dict(json.loads((model_dir / "config.json").read_text()))


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Sizes and switches of one engine.

    `kv_capacity_tokens` defaults to the brief's figure: 40 GB left after the weights at
    0.5 MB per token is about 80,000 tokens of KV on one server.

    The step budget is counted in *cost*, not tokens (see ARCHITECTURE.md, performance notes):
    a token costs `1 + context / attention_cost_tokens` units, where context is how many
    positions it attends to. `max_step_cost` caps the sum over one step, so a chunk deep in a
    30,000-token prompt is small and the running streams keep their pace.
    """

    kv_capacity_tokens: int = 80_000
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 512
    max_step_cost: float = 4096.0
    attention_cost_tokens: float = 256.0
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    # While interactive work runs in a step, at most this many bulk sequences (oldest first)
    # join it: on a CPU a step's cost grows with every sequence in it, so bulk would slow the
    # people waiting. None: no cap (a GPU's decode step barely grows with the batch).
    max_bulk_seqs_beside_interactive: int | None = None
    # ... and together they add at most this much cost to it: a bulk prompt being read would
    # otherwise ride along in every step of a stream and lengthen each one (on a CPU; on a GPU
    # a chunk beside decodes is nearly free). None: no cap.
    max_bulk_cost_beside_interactive: float | None = None
    # A prompt with more than this many tokens left to read gets at most this many a step
    # until the rest of its class is planned, then what is left, shortest read first (vLLM's
    # long_prefill_token_threshold): a 30,000-token document no longer holds back the chat
    # prompts that arrive behind it, and still reads at full speed alone. None: reads in
    # arrival order, each taking what it can.
    long_prefill_tokens: int | None = None
    # An interactive request for at most this many tokens, whose unread prompt fits one step
    # (max_num_batched_tokens), goes first: a step plans only such "express" requests while
    # the others wait, at most this many steps in a row, then one step plans everyone. On a
    # CPU a decode step of seven long streams costs several times one of a lone short reply,
    # so a ten-token answer behind them would take several times its idle time (S1); the
    # streams lose a few cheap steps. None: off (a GPU's step barely grows with the batch).
    express_max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.kv_capacity_tokens < self.block_size:
            raise ValueError("kv_capacity_tokens must hold at least one block of block_size >= 1")
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1 or self.max_step_cost <= 0:
            raise ValueError("max_num_seqs, max_num_batched_tokens and max_step_cost must be positive")
        if self.max_bulk_seqs_beside_interactive is not None and self.max_bulk_seqs_beside_interactive < 0:
            raise ValueError("max_bulk_seqs_beside_interactive must be >= 0 (or None for no cap)")
        if self.max_bulk_cost_beside_interactive is not None and self.max_bulk_cost_beside_interactive <= 0:
            raise ValueError("max_bulk_cost_beside_interactive must be positive (or None for no cap)")
        if self.long_prefill_tokens is not None and self.long_prefill_tokens < 1:
            raise ValueError("long_prefill_tokens must be positive (or None for no cap)")
        if self.express_max_tokens is not None and self.express_max_tokens < 1:
            raise ValueError("express_max_tokens must be positive (or None for no express lane)")

    @property
    def num_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size
