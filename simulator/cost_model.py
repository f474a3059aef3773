"""How long one engine step takes on the hardware being simulated: the only thing the simulator
does not take from the code we run.

A step computes `prefill_tokens` (prompt or recompute tokens, chunked) and `decode_tokens` (one
per running reply) and reads `context_tokens` of KV (the positions those tokens attend to).

Two forms:

- `RooflineCost`, the default for the brief's GPU. Decoding is memory-bound: each step reads
  the weights and every scheduled sequence's KV, so t_mem = base + context × per-token read.
  Tokens cost compute: t_compute = tokens / compute rate. The step takes the larger of the two,
  so a prefill chunk rides along with the decodes nearly free until it saturates compute
  (ARCHITECTURE.md: "on a GPU, decode is memory-bound and a chunk rides along nearly free").

      defaults: base 12 ms (40 GB of weights at ~3.3 TB/s)
                0.28 µs per KV token read (0.5 MB a token at ~1.8 TB/s effective)
                16,000 tokens/s of compute (prefill throughput of a 40 GB model)
      35 replies at ~2,150 tokens of context: 12 + 75,250 × 0.28e-3 ≈ 33 ms a step,
      so ~30 tokens/s per reply and ~1,050 tokens/s per GPU: the brief's figures.

- `LinearCost`, fitted from a measured profile (samples of (batch tokens, context, seconds),
  for instance timed steps of the CPU engine): t = a + b × tokens + c × context. On a CPU every
  token costs its full share (no memory-bound regime), which the additive form captures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np


class StepCostModel(Protocol):
    """Seconds one engine step takes."""

    def step_s(self, prefill_tokens: int, decode_tokens: int, context_tokens: int) -> float: ...


@dataclass(frozen=True, slots=True)
class RooflineCost:
    """max(memory-bound decode, compute-bound tokens): the brief's GPU by default."""

    base_s: float = 0.012
    per_context_token_s: float = 0.28e-6
    compute_tokens_per_s: float = 16_000.0

    def step_s(self, prefill_tokens: int, decode_tokens: int, context_tokens: int) -> float:
        memory = self.base_s + context_tokens * self.per_context_token_s
        compute = (prefill_tokens + decode_tokens) / self.compute_tokens_per_s
        return memory if memory >= compute else compute


def read_alone_s(cost: StepCostModel, prompt_tokens: int, step_tokens: int) -> float:
    """Seconds an idle server takes to read a prompt in chunks of `step_tokens`: the part of a
    first token's wait no scheduling can remove (a 30,000-token document takes ~1.9 s on the
    roofline GPU), so the simulator reports time to first token beyond it too."""
    seconds, start = 0.0, 0
    while start < prompt_tokens:
        chunk = min(step_tokens, prompt_tokens - start)
        start += chunk
        seconds += cost.step_s(chunk, 0, start)
    return seconds


@dataclass(frozen=True, slots=True)
class LinearCost:
    """t = base + per_token × (prefill + decode tokens) + per_context × context: a fitted profile."""

    base_s: float
    per_token_s: float
    per_context_token_s: float

    def step_s(self, prefill_tokens: int, decode_tokens: int, context_tokens: int) -> float:
        return (
            self.base_s
            + (prefill_tokens + decode_tokens) * self.per_token_s
            + context_tokens * self.per_context_token_s
        )


@dataclass(frozen=True, slots=True)
class StepSample:
    """One measured step: tokens computed, KV positions attended, seconds it took."""

    tokens: int
    context_tokens: int
    seconds: float


def fit_linear(samples: list[StepSample]) -> LinearCost:
    """Least-squares `LinearCost` through the samples (coefficients clipped at zero: a step
    never gets faster with more work, and a negative fit is noise)."""
    if len(samples) < 3:
        raise ValueError(f"fitting a step cost needs at least 3 samples, got {len(samples)}")
    x = np.array([[1.0, s.tokens, s.context_tokens] for s in samples])
    y = np.array([s.seconds for s in samples])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    base, per_token, per_context = (max(float(c), 0.0) for c in coef)
    return LinearCost(base, per_token, per_context)


def load_profile(path: Path) -> LinearCost:
    """A `LinearCost` fitted to a JSON profile: a list of {"tokens", "context_tokens", "seconds"}
    objects, or {"samples": [...]} holding one (what `simulator.cpu_profile` writes)."""
    raw = json.loads(path.read_text())
    rows = raw["samples"] if isinstance(raw, dict) else raw
    try:
        samples = [StepSample(int(r["tokens"]), int(r["context_tokens"]), float(r["seconds"])) for r in rows]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: each sample needs tokens, context_tokens and seconds ({exc})") from exc
    return fit_linear(samples)
