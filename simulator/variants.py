"""The policies a report compares in one run: the look-ahead autoscaler and three baselines.

    autoscaler   Autoscaler: forecast one start-up ahead, bulk deadlines, bulk soak
    reactive     ReactiveAutoscaler: the current rate only (bulk still backfills)
    no-backfill  Autoscaler, but the dispatcher releases no bulk: servers follow people only,
                 and the bulk would need a fleet of its own (the report says how large)
    static       StaticFleet(the scenario's GPUs): the brief's 400, sized once for the peak

Every policy that runs beside bulk is told of the backlog in its signals (the reactive one
ignores it for sizing, but the load floor must know that a KV cache full of bulk is not people
waiting); no-backfill's is not, so its servers follow people only.

The autoscaler's `LoadProfile` is seeded with `seed_history_days` days of the scenario's own
demand curve (the expected rate of its demand classes, priority and interactive, every
interval, no noise, no flash crowd): the history a service that has run for a week would have
recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.load_profile import LoadProfile
from autoscaler.policies import Autoscaler, ReactiveAutoscaler, StaticFleet
from autoscaler.signals import ScalingPolicy, ServerCapacity
from simulator.scenario import DAY, Scenario
from simulator.settings import SimSettings

VARIANTS = ("autoscaler", "reactive", "no-backfill", "static")


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    backfill: bool  # whether the dispatcher releases bulk into the room people leave


def seeded_profile(scenario: Scenario, settings: SimSettings) -> LoadProfile:
    """A profile holding the last `seed_history_days` days of the scenario's curve."""
    profile = LoadProfile()
    step = settings.autoscaler.interval_s
    t = -settings.seed_history_days * DAY
    while t < 0:
        profile.record(t, scenario.rate_at(t) * scenario.demand_share)
        t += step
    return profile


def make_policy(
    name: str, scenario: Scenario, settings: SimSettings, capacity: ServerCapacity
) -> tuple[ScalingPolicy, Variant]:
    """The policy object for variant `name`, fresh (policies hold state: one per run)."""
    spec = settings.autoscaler
    bounds = {"min_copies": settings.min_copies, "max_copies": scenario.gpus}
    if name in ("autoscaler", "no-backfill"):
        policy: ScalingPolicy = Autoscaler(spec, capacity, profile=seeded_profile(scenario, settings), **bounds)
        return policy, Variant(name, backfill=name == "autoscaler")
    if name == "reactive":
        return ReactiveAutoscaler(spec, capacity, **bounds), Variant(name, backfill=True)
    if name == "static":
        return StaticFleet(scenario.gpus), Variant(name, backfill=True)
    raise ValueError(f"unknown policy {name!r}: choose from {', '.join(VARIANTS)}")
