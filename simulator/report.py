"""The report `switchyard sim SCENARIO` writes: Markdown with the headline table, the S6
targets judged plainly for every policy, each team's share, and the figures (`plots.py`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from simulator.length_moments import moments, scenario_capacity
from simulator.plots import write_plots
from simulator.recorder import CHAT_PROMPT_TOKENS
from simulator.runner import PolicyRun
from simulator.scenario import Scenario
from simulator.settings import SimSettings
from simulator.summary import BRIEF_PEAK_GPUS, BUSY_TARGET, RAMP, TTFT_TARGET_S, Summary


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def _clock(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _verdict(met: bool | None) -> str:
    return "not covered" if met is None else ("**met**" if met else "**not met**")


def headline_table(summaries: Sequence[Summary]) -> list[str]:
    lines = [
        "| policy | TTFT p99 07-10h (all / chat-sized / beyond the read) | TTFT p50 / p99 day |"
        " inter-token p50 / p99 | peak GPUs |"
        " GPU-hours | busy | bulk batches met | 429 + 503 | wall |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        lines.append(
            f"| {s.policy} | {_s(s.ramp_ttft_p99_s)} / {_s(s.ramp_chat_ttft_p99_s)} / {_s(s.ramp_beyond_read_p99_s)} |"
            f" {_s(s.ttft_p50_s)} / {_s(s.ttft_p99_s)} |"
            f" {_s(s.itl_p50_s)} / {_s(s.itl_p99_s)} | {s.peak_gpus} | {s.paid_gpu_hours:,.0f} |"
            f" {s.busy_fraction:.0%} | {s.batches_met}/{s.batches_due} (+{s.batches_open} open) |"
            f" {s.interactive_refused + s.interactive_timed_out:,} | {s.wall_s:.0f} s |"
        )
    return lines


def targets_section(summaries: Sequence[Summary]) -> list[str]:
    ramp = f"{RAMP[0] / 3600:02.0f}:00-{RAMP[1] / 3600:02.0f}:00"
    lines = ["## S6 targets, per policy", ""]
    for s in summaries:
        peak = (
            f"{s.peak_gpus} GPUs paid for at the peak; people's requests alone held the KV of"
            f" {s.peak_interactive_gpus:.0f} GPUs then, against the brief's ~{BRIEF_PEAK_GPUS}"
        )
        lines += [
            f"- **{s.policy}**: TTFT p99 {ramp} {_s(s.ramp_ttft_p99_s)} (target ≤ {TTFT_TARGET_S:.0f} s):"
            f" {_verdict(s.ramp_met)} over every prompt; chat-sized prompts (≤ {CHAT_PROMPT_TOKENS:,} tokens)"
            f" {_s(s.ramp_chat_ttft_p99_s)} and every prompt beyond its own read {_s(s.ramp_beyond_read_p99_s)}:"
            f" {_verdict(s.ramp_met_beyond_reads)}; bulk due in the run {s.batches_met}/{s.batches_due} batches"
            f" ({s.bulk_done_in_time:,} of {s.bulk_requests:,} requests) done by their deadline:"
            f" {_verdict(s.bulk_met)}; GPU-hours busy {s.busy_fraction:.0%} (target ≥ {BUSY_TARGET:.0%}):"
            f" {_verdict(s.busy_met)}; {peak}.",
        ]
        if s.batches_open:
            lines.append(f"  {s.batches_open} batches due after the run still had {s.bulk_open_left:,} requests left.")
    return lines


def tiers_section(scenario: Scenario, summaries: Sequence[Summary]) -> list[str]:
    """Each class of people's requests per policy: TTFT over the day and through the surge, and
    what flex absorbed (empty for a run with one class and no surge)."""
    if not any(s.tiered for s in summaries):
        return []
    flash = scenario.flash
    surge = (
        "No surge."
        if flash is None
        else f"Surge: people's demand x{flash.multiplier:g} from {_clock(flash.start_s)} to"
        f" {_clock(flash.start_s + flash.duration_s)}, unforecast"
        f" (servers take {scenario.startup_s / 60:g} min to start)."
    )
    lines = [
        "## Tiers",
        "",
        surge,
        "",
        "| policy | class | arrived | TTFT p50 / p99 day | TTFT p99 surge (all / chat-sized / beyond the read) |"
        " 429 + 503 |",
        "|---|---|---|---|---|---|",
    ]
    for s in summaries:
        for c in s.classes:
            surge_p99 = f"{_s(c.surge_ttft_p99_s)} / {_s(c.surge_chat_ttft_p99_s)} / {_s(c.surge_beyond_read_p99_s)}"
            lines.append(
                f"| {s.policy} | {c.request_class} | {c.arrived:,} | {_s(c.ttft_p50_s)} / {_s(c.ttft_p99_s)} |"
                f" {surge_p99} | {c.refused_or_503:,} |"
            )
    flex = [(s.policy, s.flex) for s in summaries if s.flex is not None]
    if flex:
        lines += [
            "",
            "| policy | flex arrived | admitted after a wait (wait p99) | 429 | KV a higher tier took (exact mode) |",
        ]
        lines.append("|---|---|---|---|---|")
        for policy, f in flex:
            lines.append(
                f"| {policy} | {f.arrived:,} | {f.waited:,} ({_s(f.wait_p99_s)}) | {f.refused:,} | {f.preempted:,} |"
            )
    return lines


def teams_section(scenario: Scenario, summaries: Sequence[Summary]) -> list[str]:
    total_weight = sum(t.weight for t in scenario.teams)
    header = "| team | weight share | " + " | ".join(s.policy for s in summaries) + " |"
    lines = ["## Each team's share of tokens served", "", header, "|---|---|" + "---|" * len(summaries)]
    for team in scenario.teams:
        shares = " | ".join(f"{s.team_shares.get(team.team_id, 0.0):.0%}" for s in summaries)
        lines.append(f"| {team.team_id} | {team.weight / total_weight:.0%} | {shares} |")
    return lines


def bulk_fleet_note(scenario: Scenario, settings: SimSettings) -> str:
    """What the no-backfill baseline leaves out: the GPUs a fleet of bulk's own would need."""
    capacity = scenario_capacity(scenario, settings)
    tokens_per_day = scenario.bulk_per_day * scenario.scale * moments(scenario, settings.engine.block_size).lease_mean
    gpus = tokens_per_day / (capacity.tokens_per_s * 86_400)
    return (
        f"no-backfill runs no bulk on the interactive fleet: its {scenario.bulk_per_day * scenario.scale:,.0f}"
        f" requests a day would need a fleet of their own of at least {gpus:,.0f} GPUs busy all day"
        f" ({tokens_per_day:,.0f} tokens at {capacity.tokens_per_s:,.0f} tokens/s per GPU)."
    )


def write_report(
    out_dir: Path, scenario: Scenario, runs: Sequence[PolicyRun], *, seed: int, mode: str, notes: Sequence[str] = ()
) -> Path:
    """report.md, summary.json and the PNGs in `out_dir`; returns the Markdown's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = [run.summary for run in runs]
    figures = write_plots(runs, out_dir)
    lines = [
        f"# Simulated {scenario.name}: {scenario.description}",
        "",
        f"{scenario.gpus} GPUs at most, {scenario.hours:g} h from 00:00, seed {seed}, {mode} mode;"
        " every policy saw the same traffic. How to read it and what is approximate: docs/simulator.md.",
        "",
        *headline_table(summaries),
        "",
        "TTFT is from arrival at the gateway (a wait for room included); busy = KV held by requests /"
        " KV of every server paid for (starting and draining included); 429 + 503 are interactive"
        " requests refused by the share policy or timed out waiting for room.",
        "",
        *targets_section(summaries),
        "",
        *tiers_section(scenario, summaries),
        "",
        *teams_section(scenario, summaries),
        "",
        *(f"- {note}" for note in notes),
        "",
        "## Figures",
        "",
        *(f"![{path.stem}]({path.name})" for path in figures),
        "",
    ]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines))
    (out_dir / "summary.json").write_text(json.dumps([s.row() for s in summaries], indent=2, default=str) + "\n")
    return path
