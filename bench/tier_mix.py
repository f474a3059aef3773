"""The tiers bench's load (`bench/bench_tiers.py`): three teams with tier entitlements, a mix of
the four tiers as open-loop Poisson arrivals, one seeded schedule sent twice.

    team       tiers (weight inside the tier)        what it sends, in the pool's served rate
    chat       priority 3, default 3, batch 1        priority 0.25 (short), default 0.25, batch 0.15
    search     default 2, flex 2                     default 0.20, flex 0.35
    analytics  default 1, flex 1, batch 1            flex 0.35, batch 0.20

A stream's `share` is its arrivals a second as a fraction of the long replies the pool serves a
second (calibrated first): the long streams add up to 1.5x, the overload. Priority's requests
are short (a 16-token answer), a few percent of a long reply's KV-seconds each. Each team's
default and priority load stays inside its share of the pool (weights 3:2:1), so the overload
is flex and batch work, which the tiers are for.

Sent twice: with its tier and its targets (`x-slo-ttft-ms` / `x-slo-tpot-ms`), and as today's
gateway would get it, every interactive-shaped request (priority, default, flex) as `default`
without targets (analytics is granted `default` for that pass only; its tiered requests never
use it). Batch is sent at `class: bulk` both times.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from config.tier_names import RequestClass, ServiceTier
from contracts.service_tier import CLASS_OF_TIER, INTERACTIVE_SHAPED


@dataclass(frozen=True, slots=True)
class LatencyTarget:
    """A tier's targets in ms (TTFT from arrival, then the mean gap per token); None: none."""

    ttft_ms: int | None = None
    tpot_ms: int | None = None

    def headers(self) -> dict[str, str]:
        """The request headers that carry the targets (gateway/latency_targets.py)."""
        named = {"x-slo-ttft-ms": self.ttft_ms, "x-slo-tpot-ms": self.tpot_ms}
        return {name: str(ms) for name, ms in named.items() if ms is not None}


# Batch has no per-request target (its deadline is a day): it counts as met when it completes.
TARGETS: dict[ServiceTier, LatencyTarget] = {
    "priority": LatencyTarget(ttft_ms=2_000, tpot_ms=500),
    "default": LatencyTarget(ttft_ms=4_000, tpot_ms=500),
    "flex": LatencyTarget(ttft_ms=10_000, tpot_ms=1_000),
    "batch": LatencyTarget(),
}


@dataclass(frozen=True, slots=True)
class RequestShape:
    """A request's prompt (about this many tokens) and its reply (exactly `max_tokens`)."""

    prompt_tokens: int
    max_tokens: int


# A request's prompt from its shape and a seed (distinct seeds: distinct prompts).
PromptFor = Callable[[RequestShape, int], str]

SHORT = RequestShape(prompt_tokens=32, max_tokens=16)
LONG = RequestShape(prompt_tokens=64, max_tokens=256)


@dataclass(frozen=True, slots=True)
class TierStream:
    """One team's requests at one tier: `share` x the pool's served rate of long replies."""

    team: str
    tier: ServiceTier
    share: float
    shape: RequestShape


TEAM_WEIGHTS: dict[str, float] = {"chat": 3.0, "search": 2.0, "analytics": 1.0}
ENTITLEMENTS: dict[str, dict[ServiceTier, float]] = {
    "chat": {"priority": 3.0, "default": 3.0, "batch": 1.0},
    "search": {"default": 2.0, "flex": 2.0},
    "analytics": {"default": 1.0, "flex": 1.0, "batch": 1.0},  # default: the baseline's pass only
}
STREAMS: tuple[TierStream, ...] = (
    TierStream("chat", "priority", 0.25, SHORT),
    TierStream("chat", "default", 0.25, LONG),
    TierStream("chat", "batch", 0.15, LONG),
    TierStream("search", "default", 0.20, LONG),
    TierStream("search", "flex", 0.35, LONG),
    TierStream("analytics", "flex", 0.35, LONG),
    TierStream("analytics", "batch", 0.20, LONG),
)


def overload(streams: tuple[TierStream, ...] = STREAMS) -> float:
    """The long replies offered a second over those the pool serves (short ones left out)."""
    return sum(s.share for s in streams if s.shape == LONG)


@dataclass(frozen=True, slots=True)
class TieredRequest:
    """One request of the schedule: when it arrives (s after the phase starts), whose, at
    which tier, and what it asks."""

    index: int
    at_s: float
    team: str
    tier: ServiceTier
    prompt: str
    max_tokens: int

    def sent_class(self, baseline: bool) -> RequestClass:
        """Its `class` on /v1/generate: its tier's, or in the baseline `interactive` for every
        interactive-shaped tier (today's behaviour)."""
        own = CLASS_OF_TIER[self.tier]
        return "interactive" if baseline and own in INTERACTIVE_SHAPED else own

    def body(self, model: str, baseline: bool) -> dict[str, object]:
        return {
            "model": model,
            "prompt": self.prompt,
            "max_tokens": self.max_tokens,
            "ignore_eos": True,
            "class": self.sent_class(baseline),
        }


def build_schedule(
    served_per_s: float,
    window_s: float,
    seed: int,
    prompt_for: PromptFor,
    streams: tuple[TierStream, ...] = STREAMS,
) -> list[TieredRequest]:
    """Poisson arrivals per stream over `window_s`, in arrival order; `prompt_for(shape, seed)`
    makes each request's own prompt (no two share a prefix)."""
    rng = random.Random(seed)
    arrivals: list[tuple[float, TierStream]] = []
    for stream in streams:
        rate = stream.share * served_per_s
        at = rng.expovariate(rate)
        while at < window_s:
            arrivals.append((at, stream))
            at += rng.expovariate(rate)
    arrivals.sort(key=lambda arrival: arrival[0])
    return [
        TieredRequest(i, at, s.team, s.tier, prompt_for(s.shape, seed * 100_000 + i), s.shape.max_tokens)
        for i, (at, s) in enumerate(arrivals)
    ]
