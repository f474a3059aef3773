"""Prompt and reply lengths as the brief gives them: prompts average ~2,000 tokens with
documents up to 30,000; replies average ~300, from a few tokens to 2,000.

A mixture of a clipped log-normal (chat and short tasks) and a uniform tail (documents) keeps
both the mean and the long tail the brief names; `tests/simulator/test_scenario.py` checks the
sampled means against the brief.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    """log-normal(median, sigma) clipped to [low, high], with `tail_share` uniform in [tail_low, high]."""

    median: float
    sigma: float
    low: int
    high: int
    tail_share: float = 0.0
    tail_low: int = 0

    def sample(self, rng: random.Random) -> int:
        if self.tail_share and rng.random() < self.tail_share:
            return rng.randint(self.tail_low, self.high)
        value = self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0))
        return int(min(max(value, self.low), self.tail_cap))

    @property
    def tail_cap(self) -> int:
        """The log-normal part stays below the documents' tail."""
        return self.tail_low if self.tail_share else self.high

    def mean(self, rng: random.Random, samples: int = 20_000) -> float:
        """The mean, estimated by sampling (the clipping has no tidy closed form)."""
        return sum(self.sample(rng) for _ in range(samples)) / samples


def brief_prompt_lengths() -> LengthDistribution:
    """~2,000 tokens on average; 3% are documents of 8,000-30,000 tokens."""
    return LengthDistribution(median=1100.0, sigma=0.8, low=16, high=30_000, tail_share=0.03, tail_low=8_000)


def brief_reply_lengths() -> LengthDistribution:
    """~300 tokens on average, from 4 to 2,000."""
    return LengthDistribution(median=228.0, sigma=0.75, low=4, high=2_000)
