"""What grammar-constrained decoding costs the CPU engine (engine/grammar.py).

    step time   one engine decode step of a batch of 32, with 0, 8 and 32 of them constrained by
                a JSON schema, at the built model's vocabulary and at a synthetic 128k one (the
                `small` architecture with a 131,072-token head and tokenizer); the part of the
                step the masks take (compute + apply), and that per constrained sequence
    compile     a grammar's compile time over a dozen real-world-shaped schemas
                (bench/guided_schemas.py), p50/p99, at both vocabularies

Every variant runs side by side in one process. Random weights, so replies are random JSON
that ends when the model closes it: a finished sequence is replaced and the steps that read
new prompts are left out. Run: `python -m bench guided` (`--quick`: small sizes, for the tests).
Writes bench/results/guided.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llguidance
import numpy as np

from bench.guided_schemas import SCHEMAS
from build_engines.checkpoint import llama_config_dict, random_llama_tensors
from build_engines.corpus import generate_corpus
from build_engines.tokenizer import train_tokenizer
from config.settings import load_config
from contracts.guided_grammar import json_schema_grammar
from engine.config import EngineConfig, ModelConfig
from engine.grammar import GrammarCompiler
from engine.llm_engine import LLMEngine
from engine.model import NumpyLlama
from engine.request import EngineRequest, SamplingParams
from engine.weights import llama_weights_from_tensors
from report.result_files import write_result

NAME = "guided"
BATCH = 32
PROMPT_TOKENS = 8
STEP_GRAMMAR = json_schema_grammar(SCHEMAS["extraction"])


def synthetic_tokenizer(vocab_size: int, seed: int = 0) -> llguidance.LLTokenizer:
    """A byte-level tokenizer of `vocab_size` word-like tokens (the 256 bytes, then words with
    and without a leading space, capitalised, digits, JSON punctuation runs; EOS last). Its
    masks cost what a real tokenizer's of that size would: llguidance walks a trie of them."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    weights = np.linspace(2.0, 0.2, letters.size)
    weights /= weights.sum()
    tokens: list[bytes] = [bytes([b]) for b in range(256)]
    seen = set(tokens)
    punctuation = ['":', '",', '{"', '"}', "],", '":"', '":[', "},{", "\\n", "  ", "    "]
    while len(tokens) < vocab_size - 1:
        kind = rng.random()
        if kind < 0.02:
            text = str(int(rng.integers(0, 100_000)))
        elif kind < 0.03:
            text = str(rng.choice(punctuation)) * int(rng.integers(1, 3))
        else:
            text = "".join(rng.choice(letters, size=int(rng.integers(2, 11)), p=weights))
            if rng.random() < 0.5:
                text = " " + text
            if rng.random() < 0.15:
                text = text.title()
        token = text.encode()
        if token not in seen:
            seen.add(token)
            tokens.append(token)
    tokens.append(b"</s>")
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteTokenizer(tokens)))


class _ByteTokenizer:
    """What llguidance's TokenizerWrapper reads: the tokens, EOS, and an encoder (byte fallback:
    the engine never asks it to tokenize anything long)."""

    def __init__(self, tokens: list[bytes]) -> None:
        self.tokens = tokens
        self.eos_token_id = len(tokens) - 1
        self.bos_token_id = None
        self.special_token_ids = [self.eos_token_id]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


def random_model(vocab_size: int, seed: int, num_tokens: int, block_size: int) -> NumpyLlama:
    """The `small` architecture with random weights and a head of `vocab_size`."""
    spec = load_config().models["small"]
    assert spec.architecture is not None
    arch = {**spec.architecture.model_dump(), "vocab_size": vocab_size}
    config = ModelConfig.from_dict(llama_config_dict(**arch, max_position_embeddings=spec.max_context_tokens))
    weights = llama_weights_from_tensors(config, random_llama_tensors(config, seed))
    return NumpyLlama(weights, num_blocks=-(-num_tokens // block_size), block_size=block_size)


def measure_steps(
    model: NumpyLlama, grammars: GrammarCompiler, constrained: int, steps: int, seed: int
) -> dict[str, float]:
    """Median decode step and mask time with `constrained` of BATCH sequences under a grammar."""
    engine = LLMEngine(
        EngineConfig(kv_capacity_tokens=model.num_blocks * model.block_size, block_size=model.block_size,
                     max_num_seqs=BATCH, max_num_batched_tokens=BATCH * PROMPT_TOKENS * 2),
        model,
        grammars=grammars,
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    mask_s: list[float] = []
    original_mask = engine._mask

    def timed_mask(*args: Any) -> Any:
        started = time.perf_counter()
        try:
            return original_mask(*args)
        finally:
            mask_s.append(time.perf_counter() - started)

    engine._mask = timed_mask  # type: ignore[method-assign,assignment]
    serial = 0

    def add(constrain: bool) -> None:
        nonlocal serial
        serial += 1
        prompt = tuple(int(t) for t in rng.integers(3, min(model.vocab_size, 2000), PROMPT_TOKENS))
        sampling = SamplingParams(
            max_tokens=4 * steps,
            temperature=1.0,
            seed=serial,
            ignore_eos=True,
            grammar=STEP_GRAMMAR if constrain else None,
        )
        engine.add_request(EngineRequest(f"{'g' if constrain else 'f'}{serial}", prompt, sampling))

    for i in range(BATCH):
        add(i < constrained)
    step_times: list[float] = []
    mask_times: list[float] = []
    while len(step_times) < steps:
        del mask_s[:]
        started = time.perf_counter()
        outputs = engine.step()
        elapsed = time.perf_counter() - started
        if engine.stats().context_requests == 0 and engine.stats().scheduled_requests == BATCH:
            step_times.append(elapsed)
            mask_times.append(sum(mask_s))
        for output in outputs:
            if output.finished:
                add(output.request_id.startswith("g"))
    step_ms = statistics.median(step_times) * 1000
    mask_ms = statistics.median(mask_times) * 1000
    return {
        "step_ms": step_ms,
        "mask_ms": mask_ms,
        "mask_share": mask_ms / step_ms if step_ms else 0.0,
        "mask_us_per_seq": mask_ms * 1000 / constrained if constrained else None,  # type: ignore[dict-item]
    }


def compile_times(tokenizer: llguidance.LLTokenizer, repeats: int) -> list[float]:
    """Seconds to compile each schema's grammar, `repeats` times each, with no cache."""
    times = []
    for _ in range(repeats):
        for schema in SCHEMAS.values():
            compiler = GrammarCompiler(tokenizer)  # a fresh cache every time
            started = time.perf_counter()
            compiler.compile(json_schema_grammar(schema))
            times.append(time.perf_counter() - started)
    return times


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def built_tokenizer(quick: bool) -> tuple[str, int, Callable[[], llguidance.LLTokenizer]]:
    """The built `small` model's tokenizer (var/models/small), or in quick mode a tiny one."""
    if quick:
        tokenizer = train_tokenizer(generate_corpus(5, 2000), 512)
        return "trained-512", 512, lambda: llguidance.LLTokenizer(tokenizer.to_str(), n_vocab=512, eos_token=2)
    config = load_config()
    path = config.model_dir("small") / "tokenizer.json"
    if not path.is_file():
        raise SystemExit(f"no {path}: run `switchyard build` first")
    vocab = config.models["small"].architecture.vocab_size  # type: ignore[union-attr]
    return "small", vocab, lambda: llguidance.LLTokenizer(Path(path).read_text(), n_vocab=vocab, eos_token=2)


def run(quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    steps, repeats = (3, 1) if quick else (30, 10)
    label, vocab, make_tokenizer = built_tokenizer(quick)
    synthetic_vocab = 4096 if quick else 131_072
    variants = [
        (label, vocab, make_tokenizer),
        (f"synthetic-{synthetic_vocab}", synthetic_vocab, lambda: synthetic_tokenizer(synthetic_vocab)),
    ]
    rows: list[dict[str, Any]] = []
    for name, size, make in variants:
        tokenizer = make()
        model = random_model(size, seed=1, num_tokens=BATCH * (PROMPT_TOKENS + 4 * steps + 32) * 2, block_size=16)
        for constrained in (0, 8, 32):
            measured = measure_steps(model, GrammarCompiler(tokenizer), constrained, steps, seed=constrained)
            rows.append({"vocab": name, "vocab_size": size, "batch": BATCH, "constrained": constrained, **measured})
        compiles = compile_times(tokenizer, repeats)
        rows.append(
            {
                "vocab": name,
                "vocab_size": size,
                "compile_schemas": len(SCHEMAS),
                "compile_p50_ms": percentile(compiles, 50) * 1000,
                "compile_p99_ms": percentile(compiles, 99) * 1000,
                "compile_max_ms": max(compiles) * 1000,
            }
        )
    meta = {
        "quick": quick,
        "steps_timed": steps,
        "compile_repeats": repeats,
        "step_grammar": "the `extraction` schema (bench/guided_schemas.py), compact JSON",
        "model": "`small` architecture, random weights; decode steps only (no prompt read)",
    }
    return rows, meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench guided", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (tests); results not written")
    args = parser.parse_args(argv)
    rows, meta = run(args.quick)
    if args.quick:
        from report.result_files import format_table

        print(format_table(rows))
    else:
        write_result(NAME, rows, meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
