"""`switchyard build` for one model: a tokenizer and a random-weight HF Llama checkpoint.

    var/models/<model_id>/
        config.json  generation_config.json  model.safetensors      (build_engines.checkpoint)
        tokenizer.json  tokenizer_config.json  special_tokens_map.json  (build_engines.tokenizer)
        build_stamp.json                                             (written last)

The output is a pure function of the spec's architecture, max_context_tokens and seed (and of
BUILDER_VERSION), so every machine builds byte-identical files and every server of a pool
computes the same tokens. The stamp makes a build idempotent: a folder whose stamp matches the
spec is left alone; a changed spec rebuilds it. A build is written to a staging folder and
moved into place whole, so an interrupted build never leaves a half-written model that looks
finished.

A spec without an architecture names a checkpoint an operator put in place: the build only
checks that it loads.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer

from build_engines.checkpoint import llama_config_dict, write_random_checkpoint
from build_engines.corpus import generate_corpus
from build_engines.tokenizer import save_tokenizer, train_tokenizer
from config.settings import ModelSpec
from engine.config import ModelConfig
from engine.weights import load_llama_weights

# Bump when the builder writes different bytes for the same spec, so existing builds redo.
BUILDER_VERSION = 1
STAMP_FILE = "build_stamp.json"
BUILT_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def build_model(model_id: str, spec: ModelSpec, out_dir: Path, log: Callable[[str], None] = print) -> Path:
    """Build (or validate) model `model_id` into `out_dir` and return `out_dir`."""
    if spec.architecture is None:
        validate_checkpoint(model_id, out_dir)
        log(f"{model_id}: operator-provided checkpoint at {out_dir} loads")
        return out_dir
    digest = spec_digest(spec)
    is_complete = all((out_dir / name).is_file() for name in BUILT_FILES)
    if is_complete and _read_stamp(out_dir) == {"model_id": model_id, "spec_digest": digest}:
        log(f"{model_id}: up to date ({out_dir})")
        return out_dir

    arch = spec.architecture
    staging = out_dir.parent / f".{out_dir.name}.building"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    num_lines = max(2_000, 10 * arch.vocab_size)
    log(f"{model_id}: training a {arch.vocab_size}-token BPE tokenizer on {num_lines} generated lines")
    tokenizer = train_tokenizer(generate_corpus(spec.seed, num_lines), arch.vocab_size)
    save_tokenizer(tokenizer, staging, model_max_length=spec.max_context_tokens)
    log(
        f"{model_id}: writing random weights (hidden {arch.hidden_size}, {arch.num_hidden_layers} layers, "
        f"seed {spec.seed})"
    )
    config = llama_config_dict(**arch.model_dump(), max_position_embeddings=spec.max_context_tokens)
    write_random_checkpoint(config, spec.seed, staging)
    stamp = {"model_id": model_id, "spec_digest": digest}
    (staging / STAMP_FILE).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")

    if out_dir.exists():
        shutil.rmtree(out_dir)
    staging.rename(out_dir)
    log(f"{model_id}: built into {out_dir}")
    return out_dir


def spec_digest(spec: ModelSpec) -> str:
    """Hash of what the built files depend on; weights_uri, weights_gb and GPUs do not count."""
    arch = spec.architecture.model_dump() if spec.architecture else None
    payload = {
        "builder_version": BUILDER_VERSION,
        "architecture": arch,
        "max_context_tokens": spec.max_context_tokens,
        "seed": spec.seed,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def validate_checkpoint(model_id: str, model_dir: Path) -> ModelConfig:
    """Check that a checkpoint folder has a loadable Llama config, weights and tokenizer."""
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(
            f"model {model_id!r}: no config.json in {model_dir}; a model without an architecture in "
            "switchyard.yaml needs an HF Llama checkpoint placed at its weights_uri"
        )
    config = ModelConfig.from_pretrained(model_dir)
    load_llama_weights(model_dir, config)
    tokenizer_path = model_dir / "tokenizer.json"
    if not tokenizer_path.is_file():
        raise FileNotFoundError(f"model {model_id!r}: no tokenizer.json in {model_dir}")
    tokenizer_vocab = Tokenizer.from_file(str(tokenizer_path)).get_vocab_size()
    if tokenizer_vocab > config.vocab_size:
        raise ValueError(f"model {model_id!r}: tokenizer has {tokenizer_vocab} tokens, model only {config.vocab_size}")
    return config


def _read_stamp(out_dir: Path) -> dict[str, object] | None:
    try:
        stamp = json.loads((out_dir / STAMP_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return stamp if isinstance(stamp, dict) else None
