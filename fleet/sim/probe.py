"""The fast mode's probes: a small cell of step-level servers (the exact mode's machinery: real
Scheduler, BlockManager and RoutingPolicy) run for a short window at the load one server of the
fluid fleet carries at that moment. Their latencies stand for every server's until the next probe.

    fluid fleet at t: admitted interactive req/s per ready server, the teams running bulk
        ─▶ cell of `cell` servers, that rate × cell, those teams' bulk backfilling
        ─▶ warm-up (discarded) + window ─▶ TTFT samples, inter-token histogram

Admission runs again in the cell, on the cell's own leases: without it, people's requests
arrive into servers the cell's dispatcher filled with bulk and wait in the engine for bulk to
be preempted (a chat-sized p99 of 2-20 s at the peak rate, against ~1 s with it). In a cell of
4 servers a team's leases swing more than in a fleet of 400, so a team near its share could
borrow, or wait for room, more often than in the fleet; at 2.4 req/s a server beside bulk,
cells of 4, 8 and 16 servers gave chat-sized TTFT p99 of 1.95, 1.46 and 2.47 s (three seeds
each), so the cell's size is not what sets the tail.

Every team running bulk in the fleet runs it in the cell: a team with nothing in flight lends
its share to the others, and a team beyond its share as it would be with everyone active but
within the share it has with a team idle borrows only room no lease holds (`quota.shares`).
With one bulk team of the fleet's two in a cell at 2.8 req/s a server, people's requests
waited at the cell's gateway ~400 times in two minutes (seed 1: chat-sized p99 2.03 s, 1.23 s
with both).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from fleet.autoscaler import StaticFleet
from fleet.sim.exact_run import run_exact
from fleet.sim.histogram import Histogram
from fleet.sim.recorder import Recorder, TtftSample
from fleet.sim.scenario import BRIEF_GPUS, HOUR, BatchPlan, Scenario
from fleet.sim.settings import SimSettings
from fleet.sim.variants import Variant

PROBE_BULK_REQUESTS = 10**8  # scaled down by the cell's size: never runs out in a window


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ttft_samples: list[TtftSample]
    itl: Histogram
    kv_used_fraction: float  # busy share of the cell's KV over the window
    # How long a request holds its lease, admission to last token (Little's law over the
    # window); None when none finished. The fluid fleet turns its flows over at these.
    interactive_duration_s: float | None
    bulk_duration_s: float | None


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
) -> ProbeResult:
    """Latencies of a cell of `cell` servers fed `rate_per_server` interactive req/s each,
    beside bulk of each of `bulk_teams` (none: no bulk)."""
    scale = cell / BRIEF_GPUS
    batches = tuple(BatchPlan(f"probe-bulk-{team}", team, 0.0, PROBE_BULK_REQUESTS) for team in bulk_teams)
    scenario = replace(
        base,
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
    )
    probe_settings = replace(settings, sample_interval_s=3600.0)
    recorder = Recorder(scenario.hours, record_from_s=warmup_s, keep_ttft_samples=True)
    variant = Variant("probe", backfill=bool(batches))
    run_exact(scenario, probe_settings, StaticFleet(cell), variant, seed, recorder=recorder, initial_ready=cell)
    assert recorder.ttft_samples is not None
    itl = recorder.itl_over(0.0, scenario.duration_s)
    busy = recorder.kv_token_s / recorder.kv_capacity_token_s if recorder.kv_capacity_token_s else 0.0
    counters = recorder.counters

    def duration(kind: str) -> float | None:
        done = counters[f"{kind}_done_in_window"]
        return counters[f"{kind}_in_flight_s"] / done if done else None

    return ProbeResult(recorder.ttft_samples, itl, busy, duration("interactive"), duration("bulk"))
