"""Token sampling: greedy, top-k / top-p filters, and draws keyed by (seed, index)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from engine.request import SamplingParams
from engine.sampling import sample_token


def params(**kwargs: object) -> SamplingParams:
    return SamplingParams(max_tokens=16, **kwargs)  # type: ignore[arg-type]


def draws(logits: npt.NDArray[np.floating[Any]], p: SamplingParams, count: int) -> Counter[int]:
    """Tokens drawn at indices 0..count-1 (a different, fixed RNG stream each)."""
    return Counter(sample_token(logits, p, index) for index in range(count))


def test_greedy_takes_argmax_and_lowest_id_on_ties() -> None:
    logits = np.array([0.1, 2.0, -1.0, 2.0, 1.9], np.float32)
    assert sample_token(logits, params(), index=0) == 1
    assert sample_token(logits, params(seed=7), index=5) == 1  # a seed does not make greedy random


def test_top_k_keeps_exactly_the_k_most_likely() -> None:
    logits = np.log(np.array([0.05, 0.30, 0.10, 0.40, 0.15]))
    assert set(draws(logits, params(temperature=1.0, top_k=2, seed=1), 400)) == {1, 3}
    assert set(draws(logits, params(temperature=5.0, top_k=1, seed=1), 50)) == {3}


def test_top_k_keeps_ties_with_the_kth() -> None:
    logits = np.array([1.0, 3.0, 2.0, 3.0, 2.0])
    assert set(draws(logits, params(temperature=1.0, top_k=2, seed=2), 300)) == {1, 3}
    assert set(draws(logits, params(temperature=1.0, top_k=3, seed=2), 300)) == {1, 2, 3, 4}


@pytest.mark.parametrize(
    ("top_p", "expected"),
    [(0.3, {0}), (0.5, {0}), (0.6, {0, 1}), (0.85, {0, 1, 2}), (0.99, {0, 1, 2, 3})],
)
def test_top_p_keeps_the_smallest_set_reaching_p(top_p: float, expected: set[int]) -> None:
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    assert set(draws(logits, params(temperature=1.0, top_p=top_p, seed=3), 600)) == expected


def test_top_k_then_top_p() -> None:
    logits = np.log(np.array([0.1, 0.4, 0.2, 0.3]))
    # top_k=3 leaves {1: .4, 3: .3, 2: .2} renormalised to {.44, .33, .22}; top_p=0.7 keeps {1, 3}.
    assert set(draws(logits, params(temperature=1.0, top_k=3, top_p=0.7, seed=4), 400)) == {1, 3}


def test_same_seed_and_index_draw_the_same_token() -> None:
    logits = np.zeros(1000, np.float32)
    p = params(temperature=1.0, seed=42)
    first = [sample_token(logits, p, index) for index in range(30)]
    assert first == [sample_token(logits, p, index) for index in range(30)]
    assert len(set(first)) > 20  # different indices draw independently
    other_seed = [sample_token(logits, params(temperature=1.0, seed=43), index) for index in range(30)]
    assert other_seed != first


def test_draw_depends_only_on_seed_and_index_not_on_history() -> None:
    """A reply resumed elsewhere at token 7 draws what the original server drew at 7."""
    logits = np.random.default_rng(0).standard_normal(500)
    p = params(temperature=0.8, top_p=0.9, seed=-5)  # a negative int64 seed is accepted too
    original = [sample_token(logits, p, index) for index in range(12)]
    resumed = [sample_token(logits, p, index) for index in range(7, 12)]
    assert resumed == original[7:]


def test_draws_follow_the_distribution() -> None:
    probs = np.array([0.5, 0.3, 0.2])
    counts = draws(np.log(probs), params(temperature=1.0, seed=9), 6000)
    observed = np.array([counts[i] for i in range(3)]) / 6000
    np.testing.assert_allclose(observed, probs, atol=0.02)


def test_temperature_sharpens() -> None:
    logits = np.log(np.array([0.6, 0.4]))
    cold = draws(logits, params(temperature=0.25, seed=10), 2000)[0] / 2000
    assert cold > 0.8  # 0.6^4 / (0.6^4 + 0.4^4) = 0.835


def test_unseeded_draws_are_random() -> None:
    logits = np.zeros(10_000, np.float32)
    tokens = {sample_token(logits, params(temperature=1.0), index=0) for _ in range(20)}
    assert len(tokens) > 10


@pytest.mark.parametrize(
    "bad", [{"temperature": -1.0}, {"temperature": 1.0, "top_p": 0.0}, {"temperature": 1.0, "top_k": -1}]
)
def test_invalid_parameters_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        sample_token(np.zeros(4), params(**bad), index=0)


def test_invalid_logits_or_index_are_refused() -> None:
    with pytest.raises(ValueError, match="one non-empty row"):
        sample_token(np.zeros((2, 4)), params(), index=0)
    with pytest.raises(ValueError, match="index"):
        sample_token(np.zeros(4), params(temperature=1.0, seed=1), index=-1)
