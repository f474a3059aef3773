"""Time reading a 30,000-token prompt in 512-token chunks on the `small` and `large` models.

Random weights of each model's configured architecture (no `switchyard build` needed). This is
the number that sizes the models: the test suite and the S2/S3 scenarios read such prompts, so
`small` must read one in seconds. Run: `python -m bench.bench_prefill [--tokens N]`.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from build_engines.checkpoint import llama_config_dict, random_llama_tensors
from config.settings import ModelSpec, load_config
from engine.config import ModelConfig
from engine.forward_batch import SequenceChunk
from engine.model import NumpyLlama
from engine.weights import llama_weights_from_tensors
from report.result_files import write_result


def build_random_model(spec: ModelSpec, num_tokens: int, block_size: int) -> NumpyLlama:
    """A NumpyLlama of the spec's architecture with random weights and room for `num_tokens`."""
    if spec.architecture is None:
        raise ValueError("this benchmark needs a model with an architecture in switchyard.yaml")
    raw = llama_config_dict(**spec.architecture.model_dump(), max_position_embeddings=spec.max_context_tokens)
    config = ModelConfig.from_dict(raw)
    weights = llama_weights_from_tensors(config, random_llama_tensors(config, spec.seed))
    return NumpyLlama(weights, num_blocks=-(-num_tokens // block_size), block_size=block_size)


def time_prefill(model: NumpyLlama, num_tokens: int, chunk_size: int, seed: int) -> tuple[float, list[float]]:
    """Seconds to read a `num_tokens` prompt chunk by chunk, and each chunk's seconds."""
    rng = np.random.default_rng(seed)
    prompt = tuple(int(t) for t in rng.integers(3, model.vocab_size, num_tokens))
    # Scatter the blocks: a real block manager's table is rarely one ascending run.
    block_table = tuple(int(b) for b in rng.permutation(model.num_blocks))
    chunk_seconds = []
    for start in range(0, num_tokens, chunk_size):
        tokens = prompt[start : start + chunk_size]
        last = start + len(tokens) == num_tokens
        began = time.perf_counter()
        model.forward([SequenceChunk(tokens, start, block_table, need_logits=last)])
        chunk_seconds.append(time.perf_counter() - began)
    return sum(chunk_seconds), chunk_seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=30_000)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--models", nargs="+", default=["small", "large"])
    args = parser.parse_args(argv)
    config = load_config()
    rows: list[dict[str, Any]] = []
    for model_id in args.models:
        spec = config.models[model_id]
        model = build_random_model(spec, args.tokens, block_size=16)
        total, per_chunk = time_prefill(model, args.tokens, args.chunk, seed=0)
        cfg = model.config
        rows.append(
            {
                "model": model_id,
                "shape": f"h{cfg.hidden_size} L{cfg.num_hidden_layers} H{cfg.num_attention_heads} "
                f"KV{cfg.num_key_value_heads}",
                "tokens": args.tokens,
                "chunk": args.chunk,
                "seconds": round(total, 3),
                "tokens_per_s": round(args.tokens / total, 1),
                "first_chunk_ms": round(per_chunk[0] * 1000, 2),
                "last_chunk_ms": round(per_chunk[-1] * 1000, 2),
            }
        )
    meta = {"what": f"{args.tokens}-token prompt read in {args.chunk}-token chunks, random weights"}
    write_result("prefill", rows, meta)


if __name__ == "__main__":
    main()
