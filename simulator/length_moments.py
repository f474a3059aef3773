"""The averages the fluid fleet needs from the length distributions, estimated once by sampling.

A request in flight is weighted by how long it stays, so the KV an in-flight request holds on
average is not (prompt + reply / 2) of the mean request but of the duration-weighted one:

    E[KV held] = E[prompt] + E[reply²] / (2 E[reply])        (reply steps ∝ reply length)
    E[lease]   = E[prompt] + E[reply²] / E[reply]
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

from autoscaler.signals import ServerCapacity
from simulator.lengths import LengthDistribution
from simulator.scenario import Scenario
from simulator.settings import SimSettings, server_capacity


@dataclass(frozen=True, slots=True)
class Moments:
    prompt_mean: float
    reply_mean: float
    kv_in_flight: float  # KV tokens an in-flight request holds, time-averaged
    lease_mean: float  # prompt + max_tokens of the mean request
    # The lease of an in-flight request, time-averaged: long replies stay longer, so
    # E[prompt] + E[reply²] / E[reply], above lease_mean. Leases ebb at lease_mean / this
    # of the rate requests do, so the tokens in flight come out right.
    lease_in_flight: float


def moments(scenario: Scenario, block_size: int) -> Moments:
    return _moments(scenario.prompt, scenario.reply, block_size)


@lru_cache(maxsize=16)
def _moments(prompt: LengthDistribution, reply: LengthDistribution, block_size: int, samples: int = 40_000) -> Moments:
    """Sampled once per distribution (each probe would otherwise pay for it again)."""
    rng = random.Random(12345)
    prompts = [prompt.sample(rng) for _ in range(samples)]
    replies = [reply.sample(rng) for _ in range(samples)]
    prompt_mean = sum(prompts) / samples
    reply_mean = sum(replies) / samples
    reply_sq = sum(r * r for r in replies) / samples
    kv = prompt_mean + reply_sq / (2 * reply_mean) + block_size / 2
    lease_in_flight = prompt_mean + reply_sq / reply_mean
    return Moments(prompt_mean, reply_mean, kv, prompt_mean + reply_mean, lease_in_flight)


def scenario_capacity(scenario: Scenario, settings: SimSettings) -> ServerCapacity:
    """What the autoscaler is told one server carries, in the units admission counts.

    Admission leases prompt + max_tokens for a request's whole life, and long replies stay
    longest, so a server full of leases holds KV / E[lease in flight] requests (~31.7 at the
    brief's lengths), not KV / mean request (~34.8): telling the autoscaler the latter leaves
    the pool ~10% short of what its own admission lets in. The request's duration is its reply
    at the step time of a full server (`server_capacity`'s steady state).
    """
    m = moments(scenario, settings.engine.block_size)
    nominal = server_capacity(settings, m.prompt_mean, m.reply_mean, scenario.startup_s)
    seats = settings.engine.kv_capacity_tokens / m.lease_in_flight
    avg_request_s = (
        nominal.avg_request_s
        * (m.reply_mean + math.ceil(m.prompt_mean / settings.engine.max_num_batched_tokens))
        / m.reply_mean
    )
    return ServerCapacity(
        requests=seats,
        tokens_per_s=seats * m.lease_mean / avg_request_s,
        avg_request_s=avg_request_s,
        startup_s=scenario.startup_s,
    )
