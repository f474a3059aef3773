"""The fast mode's probes: a small cell of step-level servers (the exact mode's machinery: real
Scheduler, BlockManager and RoutingPolicy) run for a short window at the load one server of the
fluid fleet carries at that moment. Their latencies stand for every server's until the next probe.

    fluid fleet at t: admitted people's req/s per ready server and their classes' mix, the
        teams running bulk
        ─▶ cell of `cell` servers, that rate × cell in that mix, those teams' bulk backfilling
        ─▶ warm-up (discarded) + window ─▶ TTFT samples (each with its class), inter-token
           histogram, how long each class holds its lease

Admission runs again in the cell, on the cell's own leases: without it, people's requests
arrive into servers the cell's dispatcher filled with bulk and wait in the engine for bulk to
be preempted (a chat-sized p99 of 2-20 s at the peak rate, against ~1 s with it). In a cell of
4 servers a team's leases swing more than in a fleet of 400, so a team near its share could
borrow, or wait for room, more often than in the fleet; at 2.4 req/s a server beside bulk,
cells of 4, 8 and 16 servers gave chat-sized TTFT p99 of 1.95, 1.46 and 2.47 s (three seeds
each), so the cell's size is not what sets the tail.

The teams running bulk in the fleet run it in the cell as one team of their summed weight
(`cell_teams`). A team with nothing in flight lends its share to the others, and people over
their share as it is with everyone active but within the one they have while a team is idle
borrow only room no lease holds (`quota.shares`), so they wait for it. In the fleet a bulk
team's share is hundreds of requests and it is never idle; in a cell it is a few, and a
document beyond it left the team idle between releases. At 2.8 req/s a server, seeds 1 / 2:
with one of the fleet's two bulk teams in the cell, people waited at its gateway ~400 times in
two minutes (chat-sized p99 2.03 / 3.00 s); with both, 221 / 363 times (1.23 / 2.42 s);
merged into one, never (1.31 / 0.65 s). Merging people's teams as well did not steady the
tail (2.83 / 1.18 s), so they keep their own shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from autoscaler.policies import StaticFleet
from contracts.service_tier import RequestClass
from simulator.exact_run import run_exact
from simulator.histogram import Histogram
from simulator.recorder import Recorder, TtftSample
from simulator.scenario import BRIEF_GPUS, HOUR, BatchPlan, ClassMix, Scenario, TeamMix
from simulator.settings import SimSettings
from simulator.variants import Variant

PROBE_BULK_REQUESTS = 10**8  # scaled down by the cell's size: never runs out in a window
PROBE_BULK_TEAM = "probe-bulk"  # the fleet's teams running bulk, as one (`cell_teams`)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ttft_samples: list[TtftSample]
    itl: Histogram
    kv_used_fraction: float  # busy share of the cell's KV over the window
    # How long a request of each class holds its lease, admission to last token (Little's law
    # over the window); a class none of which finished is absent. The fluid fleet turns its
    # flows over at these.
    durations_s: dict[RequestClass, float]

    def duration_s(self, request_class: RequestClass) -> float | None:
        return self.durations_s.get(request_class)


def cell_teams(teams: Sequence[TeamMix], bulk_teams: Sequence[str]) -> tuple[TeamMix, ...]:
    """The cell's teams: the fleet's, with `bulk_teams` (those running bulk now) merged into
    one, `PROBE_BULK_TEAM`, of their summed weight and traffic. Idle teams stay, idle: a static
    share counts every configured team."""
    running = set(bulk_teams)
    if unknown := running - {t.team_id for t in teams}:
        raise ValueError(f"bulk teams not in the scenario: {sorted(unknown)}")
    merged = [t for t in teams if t.team_id in running]
    kept = tuple(t for t in teams if t.team_id not in running)
    if not merged:
        return kept
    bulk = TeamMix(
        PROBE_BULK_TEAM,
        weight=sum(t.weight for t in merged),
        interactive_share=sum(t.interactive_share for t in merged),
        bulk_share=sum(t.bulk_share for t in merged),
    )
    return (*kept, bulk)


def run_probe(
    base: Scenario,
    settings: SimSettings,
    *,
    rate_per_server: float,
    bulk_teams: Sequence[str],
    cell: int,
    warmup_s: float,
    window_s: float,
    seed: int,
    class_mix: ClassMix | None = None,
) -> ProbeResult:
    """Latencies of a cell of `cell` servers fed `rate_per_server` people's req/s each, in
    `class_mix` (None: the scenario's), beside the bulk of `bulk_teams` (none: no bulk)."""
    scale = cell / BRIEF_GPUS
    batches = (BatchPlan("probe-bulk", PROBE_BULK_TEAM, 0.0, PROBE_BULK_REQUESTS),) if bulk_teams else ()
    scenario = replace(
        base,
        teams=cell_teams(base.teams, bulk_teams),
        name=f"{base.name}-probe",
        hours=(warmup_s + window_s) / HOUR,
        gpus=cell,
        peak_rate=rate_per_server * cell / scale,
        knots=((0.0, 1.0), (24.0, 1.0)),
        bulk_per_day=0.0,
        carry_over_hours=0.0,
        extra_batches=batches,
        flash=None,
        failures_per_server_hour=0.0,
        class_mix=base.class_mix if class_mix is None else class_mix,
    )
    probe_settings = replace(settings, sample_interval_s=3600.0)
    recorder = Recorder(scenario.hours, record_from_s=warmup_s, keep_ttft_samples=True)
    variant = Variant("probe", backfill=bool(batches))
    run_exact(scenario, probe_settings, StaticFleet(cell), variant, seed, recorder=recorder, initial_ready=cell)
    assert recorder.ttft_samples is not None
    itl = recorder.itl_over(0.0, scenario.duration_s)
    busy = recorder.kv_token_s / recorder.kv_capacity_token_s if recorder.kv_capacity_token_s else 0.0
    counters = recorder.counters

    durations = {
        request_class: counters[f"{request_class}_in_flight_s"] / done
        for request_class in (*recorder.class_ttft, "bulk")
        if (done := counters[f"{request_class}_done_in_window"])
    }
    return ProbeResult(recorder.ttft_samples, itl, busy, durations)
