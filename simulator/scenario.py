r"""The traffic a simulated day carries: interactive demand over the day, bulk batches, teams,
the brief's length distributions, the people's tier mix, failures and surprises. Plain data.

The clock starts at 00:00 on a weekday (t = 0). All figures are the brief's at 400 GPUs and
scale with the fleet (`scaled`), so a small fleet sees the same day in miniature.

    interactive req/s (weekday, peak 1,000, a third at night)
    1000 |              ______    ____
         |            _/      \__/    \_
     333 |__________/                   \____
         0h    6h   9h    12h    17h    22h 24h
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

from autoscaler.demand_classes import DEMAND_CLASSES
from contracts.service_tier import RequestClass
from simulator.lengths import LengthDistribution, brief_prompt_lengths, brief_reply_lengths
from simulator.sim_request import SHAPED_CLASSES

HOUR = 3600.0
DAY = 24 * HOUR
BRIEF_GPUS = 400

# Share of the peak by hour of a weekday: a third at night, the morning ramp from 7 to 10.
WEEKDAY_KNOTS: tuple[tuple[float, float], ...] = (
    (0, 1 / 3), (6, 1 / 3), (7, 0.42), (8, 0.65), (9, 0.88), (10, 1.0), (12, 0.97), (13, 0.9),
    (14, 1.0), (17, 0.95), (19, 0.62), (22, 0.4), (24, 1 / 3),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class TeamMix:
    """A team: its weight (shares) and its part of the interactive and the bulk traffic."""

    team_id: str
    weight: float
    interactive_share: float
    bulk_share: float


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """One bulk batch: submitted at `arrival_s`, `count` requests, due `deadline_s` after."""

    batch_id: str
    team_id: str
    arrival_s: float
    count: int
    deadline_s: float = DAY


ClassMix = tuple[tuple[RequestClass, float], ...]

# Before the tiers every person's request was interactive (the default tier).
ALL_INTERACTIVE: ClassMix = (("interactive", 1.0),)
# The people's arrivals by tier (docs/simulator.md, "Tiers"): a tenth pays for priority, and
# 15% is work that can wait for room (agents, evaluations) sent as flex rather than at the
# default tier. The people's volume stays today's, so a run without tiers compares like with
# like; batch is today's bulk.
TIER_MIX: ClassMix = (("priority", 0.10), ("interactive", 0.75), ("flex", 0.15))


@dataclass(frozen=True, slots=True)
class FlashCrowd:
    """Interactive demand × `multiplier` from `start_s` for `duration_s`: nothing forecast it,
    so servers started for it are ready a start-up (eight minutes) after it arrives."""

    start_s: float
    duration_s: float
    multiplier: float


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    hours: float = 24.0
    gpus: int = BRIEF_GPUS
    peak_rate: float = 1000.0  # interactive requests per second at the peak
    knots: tuple[tuple[float, float], ...] = WEEKDAY_KNOTS
    bulk_per_day: float = 30e6
    teams: tuple[TeamMix, ...] = ()
    extra_batches: tuple[BatchPlan, ...] = ()
    # Yesterday's afternoon and evening batches are still queued at midnight (see docs).
    carry_over_hours: float = 12.0
    flash: FlashCrowd | None = None
    failures_per_server_hour: float = 0.0
    prompt: LengthDistribution = field(default_factory=brief_prompt_lengths)
    reply: LengthDistribution = field(default_factory=brief_reply_lengths)
    startup_s: float = 480.0
    class_mix: ClassMix = ALL_INTERACTIVE  # the people's arrivals by class (bulk is the batches)

    def __post_init__(self) -> None:
        classes = [c for c, _ in self.class_mix]
        if not set(classes) <= set(SHAPED_CLASSES) or len(set(classes)) != len(classes):
            raise ValueError(f"class_mix: each of {SHAPED_CLASSES} at most once, got {classes}")
        if any(share < 0 for _, share in self.class_mix) or abs(sum(s for _, s in self.class_mix) - 1) > 1e-9:
            raise ValueError(f"class_mix: shares must be non-negative and sum to 1, got {self.class_mix}")

    @property
    def duration_s(self) -> float:
        return self.hours * HOUR

    @property
    def demand_share(self) -> float:
        """The share of the people's arrivals in the classes servers are started for."""
        return sum(share for c, share in self.class_mix if c in DEMAND_CLASSES)

    @property
    def focus_s(self) -> tuple[float, float] | None:
        """The window reported on its own (the flash crowd or surge), if any."""
        flash = self.flash
        return None if flash is None else (flash.start_s, flash.start_s + flash.duration_s)

    @property
    def scale(self) -> float:
        """This fleet's size against the brief's 400 GPUs: demand scales by it."""
        return self.gpus / BRIEF_GPUS

    def rate_at(self, t: float) -> float:
        """Interactive requests per second arriving at time t (seconds since midnight)."""
        hour = (t % DAY) / HOUR
        xs = [k[0] for k in self.knots]
        i = min(max(bisect.bisect_right(xs, hour) - 1, 0), len(xs) - 2)
        (x0, y0), (x1, y1) = self.knots[i], self.knots[i + 1]
        share = y0 + (y1 - y0) * (hour - x0) / (x1 - x0)
        rate = self.peak_rate * self.scale * share
        flash = self.flash
        if flash is not None and flash.start_s <= t < flash.start_s + flash.duration_s:
            rate *= flash.multiplier
        return rate

    def max_rate(self) -> float:
        """An upper bound of `rate_at` (for thinning)."""
        top = self.peak_rate * self.scale * max(k[1] for k in self.knots)
        return top * (self.flash.multiplier if self.flash is not None else 1.0)

    def batches(self) -> list[BatchPlan]:
        """Routine batches every hour per bulk team (yesterday's carry-over at t = 0), plus extras.

        Bulk is submitted evenly over the day (the brief's ~350/s spread out); each routine
        batch is due 24 h after submission. The carry-over are those submitted during the last
        `carry_over_hours` of yesterday, queued at midnight with their remaining time to run.
        """
        per_hour = self.bulk_per_day * self.scale / 24.0
        plans: list[BatchPlan] = []
        first_hour = -int(self.carry_over_hours)
        for hour in range(first_hour, int(self.hours + 0.999)):
            for team in self.teams:
                count = round(per_hour * team.bulk_share)
                if count <= 0:
                    continue
                submitted = hour * HOUR
                plans.append(
                    BatchPlan(
                        batch_id=f"{team.team_id}-h{hour:+03d}",
                        team_id=team.team_id,
                        arrival_s=max(submitted, 0.0),
                        count=count,
                        deadline_s=submitted + DAY - max(submitted, 0.0),
                    )
                )
        plans.extend(replace(b, count=max(1, round(b.count * self.scale))) for b in self.extra_batches)
        return sorted(plans, key=lambda b: (b.arrival_s, b.batch_id))


# Interactive teams and bulk teams apart: a team's own bulk counts against its share, so a
# team running both would see its people's requests borrowed at bulk priority (docs/simulator.md).
# Weights follow what each team needs at its own busiest: people's leases reach ~88% of the
# fleet at the peak (chat 53%, search 35%: shares 54.5% and 36.4%), and bulk mostly runs on
# room borrowed while people are few, split between the bulk teams by their volumes (60/40),
# so fair release order and earliest deadlines agree. Weights that undercover a team's peak
# push its people to borrowed room at bulk priority: their first tokens wait behind bulk.
WEEKDAY_TEAMS = (
    TeamMix("chat", weight=6.0, interactive_share=0.6, bulk_share=0.0),
    TeamMix("search", weight=4.0, interactive_share=0.4, bulk_share=0.0),
    TeamMix("analytics", weight=0.6, interactive_share=0.0, bulk_share=0.6),
    TeamMix("docs", weight=0.4, interactive_share=0.0, bulk_share=0.4),
)


def scenario(name: str, *, gpus: int = BRIEF_GPUS, hours: float = 24.0) -> Scenario:
    """One of the named scenarios (`SCENARIOS`), at `gpus` GPUs for `hours` hours."""
    base = Scenario(
        name="weekday",
        description="1,000 interactive req/s peak, a third at night; 30M bulk requests a day",
        teams=WEEKDAY_TEAMS,
        gpus=gpus,
        hours=hours,
    )
    if name == "weekday":
        return base
    if name == "monday-9am":
        batch = BatchPlan("analytics-monday", "analytics", arrival_s=9 * HOUR, count=5_000_000)
        return replace(
            base,
            name=name,
            description="the weekday plus 5 million bulk requests arriving at 9 am into the morning ramp",
            extra_batches=(batch,),
        )
    if name == "failures":
        return replace(
            base, name=name, description="the weekday with servers dying at random", failures_per_server_hour=0.02
        )
    if name == "flash-crowd":
        flash = FlashCrowd(start_s=15 * HOUR, duration_s=20 * 60, multiplier=1.3)
        return replace(
            base, name=name, description="the weekday with interactive demand +30% for 20 min at 15:00", flash=flash
        )
    if name == "weekday-surge":
        return replace(
            base,
            name=name,
            description="the weekday with people's demand x1.5 for 30 min at 14:00, every request interactive",
            flash=SURGE,
        )
    if name == "weekday-tiers":
        return replace(
            base,
            name=name,
            description="the weekday's people as priority 10% / default 75% / flex 15%, batch as bulk,"
            " and demand x1.5 for 30 min at 14:00",
            flash=SURGE,
            class_mix=TIER_MIX,
        )
    raise ValueError(f"unknown scenario {name!r}: choose from {', '.join(SCENARIOS)}")


# The surge the tiers are judged through: at the afternoon's peak, unforecast, so the servers
# started for it arrive a start-up (eight minutes) later; beyond what 400 GPUs carry.
SURGE = FlashCrowd(start_s=14 * HOUR, duration_s=30 * 60, multiplier=1.5)
SCENARIOS = ("weekday", "monday-9am", "failures", "flash-crowd", "weekday-surge", "weekday-tiers")
