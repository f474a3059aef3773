"""Pick the next token from one row of logits.

The random draw for completion token `index` comes from an RNG seeded by (seed, index) and
nothing else: no generator carries state from one token to the next. That is what lets a reply
cut off on a dying server resume on another from the tokens already sent and continue exactly
as it would have (ARCHITECTURE.md, determinism).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from engine.request import SamplingParams

# numpy's SeedSequence takes non-negative integers; a caller's int64 seed is mapped onto them.
_SEED_MODULUS = 2**64


def sample_token(logits: npt.NDArray[np.floating[Any]], params: SamplingParams, index: int) -> int:
    """The next token id for a [vocab] row of logits.

    temperature == 0 is greedy: argmax, the lowest id among equal maxima. Otherwise the logits
    are divided by the temperature, cut to the `top_k` highest (ties with the k-th are kept,
    as in HF) and to the smallest set of most likely tokens whose probability reaches `top_p`
    (at least one token), and one token is drawn. `index` is the completion token's position in
    the reply (0 for the first); with `seed` None the draw is fresh randomness.
    """
    if logits.ndim != 1 or logits.size == 0:
        raise ValueError(f"expected one non-empty row of logits, got shape {logits.shape}")
    if params.temperature < 0 or params.top_k < 0 or not 0.0 < params.top_p <= 1.0:
        raise ValueError("temperature and top_k must be >= 0 and top_p in (0, 1]")
    if index < 0:
        raise ValueError(f"index must be >= 0, got {index}")
    if params.temperature == 0:
        return int(np.argmax(logits))

    candidate_ids, probs = _filtered_distribution(logits, params)
    rng = (
        np.random.default_rng() if params.seed is None else np.random.default_rng([params.seed % _SEED_MODULUS, index])
    )
    cumulative = np.cumsum(probs)
    pick = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return int(candidate_ids[min(pick, len(candidate_ids) - 1)])


def _filtered_distribution(
    logits: npt.NDArray[np.floating[Any]], params: SamplingParams
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """Candidate ids in ascending id order and their (unnormalised) probabilities.

    Candidates are kept in id order, not probability order, so the inverse-CDF draw maps a
    random number to the same token whatever order a sort happened to break ties in.
    """
    scaled = logits.astype(np.float64) / params.temperature
    ids = np.arange(scaled.size)
    if 0 < params.top_k < scaled.size:
        kth = np.partition(scaled, scaled.size - params.top_k)[scaled.size - params.top_k]
        keep = scaled >= kth
        ids, scaled = ids[keep], scaled[keep]
    probs = np.exp(scaled - scaled.max())
    if params.top_p < 1.0:
        probs = probs / probs.sum()
        order = np.argsort(-probs, kind="stable")  # most likely first, lower id first on ties
        mass_before = np.cumsum(probs[order]) - probs[order]
        # Keep a token while the tokens more likely than it still fall short of top_p: the
        # smallest prefix reaching top_p, and never less than the single most likely token.
        keep_sorted = mass_before < params.top_p
        keep_ids = np.sort(order[keep_sorted])
        ids, probs = ids[keep_ids], probs[keep_ids]
    return ids, probs
