"""Tiers under overload (issue 40): priority, default, flex and batch from three teams on one
CPU server overloaded to ~1.5x what it serves, against the same requests sent as today's
gateway gets them (every interactive-shaped request as `default`).

    start a stack: one small-model server whose KV holds SLOTS long replies (admission's room)
    idle probe ─▶ a short priority request's TTFT, nothing else running
    calibrate  ─▶ long replies served a second with every slot busy (closed loops by team weight)
    schedule   ─▶ Poisson arrivals of the mix (bench/tier_mix.py) for WINDOW_S, 1.5x that rate
    tiers      ─▶ each request at its tier with its targets (x-slo-ttft-ms / x-slo-tpot-ms)
    baseline   ─▶ the same requests, priority/default/flex all as `default`, no targets

Per tier (bench/tier_rows.py): TTFT p50/p99, TPOT p99, goodput (completed within both
targets), refusals, the gateway's mean admission wait, each team's share of the tier against its
weighted fair share. Targets (bench/tier_findings.py): priority goodput >= 0.95 and >= the
baseline's; the short priority request's TTFT <= 2x idle; flex refused only with 429 +
Retry-After + `flex_capacity_unavailable`, priority and default never; each team within +-10 %
of its fair share inside each tier.

`python -m bench tiers`; writes bench/results/tiers.json (the baseline's rows under `baseline`).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from bench.admission_waits import AdmissionWait, admission_waits, scrape
from bench.live import load_tokenizer, prompt_of, start_stack
from bench.serving_processes import WindowCpu, engine_stubs, find_serving_processes, snapshot, window_cpu
from bench.tier_calibration import Calibration, idle_ttfts, median_ms, served_per_s
from bench.tier_findings import error_lines, failures, log_size, off_fair_share, refusal_groups, targets_met
from bench.tier_mix import (
    ENTITLEMENTS,
    LONG,
    SHORT,
    STREAMS,
    TARGETS,
    TEAM_WEIGHTS,
    RequestShape,
    TieredRequest,
    build_schedule,
    overload,
)
from bench.tier_phase import RequestOutcome, open_clients, run_phase
from bench.tier_rows import shares_by_tier, tier_rows
from config.settings import EngineSpec, SwitchyardConfig, TeamSpec
from config.tier_names import ServiceTier
from contracts.service_tier import CLASS_OF_TIER, INTERACTIVE_SHAPED, SERVICE_TIERS
from report.result_files import format_table, write_result
from stack.local_stack import Stack
from stack.measured_stack import measured_config

NAME = "tiers"
POOL = "bench-small"
SLOTS = 12  # long replies the server's KV holds at once: 6 / 4 / 2 by the teams' weights
IDLE_PROBES = 12
CALIBRATION_WARM_UP_S = 2.0
CALIBRATION_S = 8.0
WINDOW_S = 30.0  # arrivals per phase
DRAIN_S = 20.0  # after the last arrival, what still runs is cancelled
SETTLE_S = 2.0  # between phases: the cancelled requests' leases go
SEED = 40


@dataclass(slots=True)
class Phase:
    """One pass of the schedule: what each request got, the gateway's admission waits, and the
    CPU seconds each part of the stack (and this client) spent meanwhile."""

    outcomes: list[RequestOutcome]
    waits: dict[str, AdmissionWait]
    cpu_s: dict[str, float]


def _cpu_by_part(window: WindowCpu, client_s: float) -> dict[str, float]:
    """A window's CPU seconds summed by part: gateway (supervisor and workers), server (its host,
    tritonserver, the stubs; the engine's step thread also apart), Redis, this client."""
    parts = {"wall": window.wall_s, "gateway": 0.0, "server": 0.0, "engine_step": window.engine_thread_s or 0.0,
             "redis": 0.0, "client": client_s}  # fmt: skip
    for role, seconds in window.by_role.items():
        part = "gateway" if role.startswith("gateway") else "redis" if role == "redis" else "server"
        parts[part] += seconds
    return {part: round(seconds, 2) for part, seconds in parts.items()}


def tiers_config(base: SwitchyardConfig) -> SwitchyardConfig:
    """One server of the small model with KV for SLOTS long replies (each rounded up to whole
    blocks, so what admission leases always fits the engine), the three teams entitled."""
    engine = base.pools["small"].engine
    block = engine.block_size
    lease = math.ceil((LONG.prompt_tokens + 2 + LONG.max_tokens) / block) * block  # prompt_of: about n tokens
    spec = EngineSpec(**{**engine.model_dump(), "kv_capacity_tokens": SLOTS * lease})
    config = measured_config(base, {POOL: ("small", spec)}, TEAM_WEIGHTS)
    teams = {team: TeamSpec(weight=TEAM_WEIGHTS[team], tiers=dict(tiers)) for team, tiers in ENTITLEMENTS.items()}
    return config.model_copy(update={"teams": teams})


def run_default(base: SwitchyardConfig) -> dict[str, Any]:
    """`python -m bench tiers` (and `make bench`): a stack of its own, the run, the results file."""
    config = tiers_config(base)
    gateway_log = config.var_path / "logs" / "gateway.log"
    offset = log_size(gateway_log)  # var/bench's logs are appended run after run
    stack, headers = start_stack(config)
    try:
        result = asyncio.run(_measure(stack, config, headers))
    finally:
        stack.stop()
    result["meta"]["gateway_error_lines"] = error_lines(gateway_log, offset)
    _write(result)
    return result


async def _measure(stack: Stack, config: SwitchyardConfig, auth: dict[str, dict[str, str]]) -> dict[str, Any]:
    url = stack.gateway_url
    tokenizer = load_tokenizer(config, POOL)

    def prompt_for(shape: RequestShape, seed: int) -> str:
        return prompt_of(tokenizer, shape.prompt_tokens, seed)

    async with httpx.AsyncClient(timeout=None, headers={**auth["chat"], **TARGETS["priority"].headers()}) as chat:
        idle = await idle_ttfts(chat, url, POOL, [prompt_for(SHORT, 7_000 + i) for i in range(IDLE_PROBES)])
    loops = {team: round(SLOTS * w / sum(TEAM_WEIGHTS.values())) for team, w in TEAM_WEIGHTS.items()}
    calibration = {team: httpx.AsyncClient(timeout=None, headers=auth[team]) for team in TEAM_WEIGHTS}
    try:
        calibrated = await served_per_s(
            {t: (c, loops[t]) for t, c in calibration.items()}, url, POOL, prompt_for, CALIBRATION_WARM_UP_S,
            CALIBRATION_S,
        )  # fmt: skip
    finally:
        await asyncio.gather(*(c.aclose() for c in calibration.values()))
    await asyncio.sleep(SETTLE_S)
    schedule = build_schedule(calibrated.served_per_s, WINDOW_S, SEED, prompt_for)
    tiered = await _phase(stack, schedule, auth, baseline=False)
    await asyncio.sleep(SETTLE_S)
    baseline = await _phase(stack, schedule, auth, baseline=True)
    rows = _with_waits(tier_rows(tiered.outcomes, ENTITLEMENTS), tiered.waits)
    baseline_rows = _with_waits(tier_rows(baseline.outcomes, _baseline_weights()), baseline.waits)
    meta = _meta(idle, calibrated, schedule, tiered, baseline, rows, baseline_rows, config)
    return {"rows": rows, "baseline": baseline_rows, "meta": meta}


async def _phase(
    stack: Stack, schedule: list[TieredRequest], auth: dict[str, dict[str, str]], *, baseline: bool
) -> Phase:
    url = stack.gateway_url
    assert stack.gateway is not None
    processes = find_serving_processes(os.getpid(), stack.gateway.pid)
    engines = [p.pid for p in engine_stubs(processes)]
    headers = {
        (s.team, s.tier): auth[s.team] if baseline else {**auth[s.team], **TARGETS[s.tier].headers()} for s in STREAMS
    }
    clients = open_clients(headers)
    before, cpu_before, client_before = scrape(url, POOL), snapshot(processes, engines), time.process_time()
    try:
        outcomes = await run_phase(
            url, POOL, schedule, clients, baseline=baseline, retry_for_s=WINDOW_S, drain_s=DRAIN_S
        )
    finally:
        await asyncio.gather(*(c.aclose() for c in clients.values()))
    window = window_cpu(processes, cpu_before, snapshot(processes, engines))
    cpu = _cpu_by_part(window, time.process_time() - client_before)
    return Phase(outcomes, admission_waits(before, scrape(url, POOL)), cpu)


def _with_waits(rows: list[dict[str, Any]], waits: dict[str, AdmissionWait]) -> list[dict[str, Any]]:
    """Each row with the gateway's mean admission wait of the class its requests were sent at
    (in the baseline one figure for the three tiers sent as `interactive`)."""
    for row in rows:
        wait = waits.get(str(row["sent_as"]))
        row["admit_wait_mean_ms"] = None if wait is None else wait.mean_ms
    return rows


def _write(result: dict[str, Any]) -> None:
    """tiers.json ({"name", "meta", "rows"} plus the baseline's rows under "baseline") and both tables."""
    path = write_result(NAME, result["rows"], result["meta"])
    stored = json.loads(path.read_text())
    path.write_text(json.dumps({**stored, "baseline": result["baseline"]}, indent=2, default=str) + "\n")
    print(f"== {NAME}: baseline (priority, default and flex all sent as default, no targets) ==")
    print(format_table(result["baseline"]))


def _baseline_weights() -> dict[str, dict[ServiceTier, float]]:
    """In the baseline every interactive-shaped tier is sent as `default`: its teams share it by
    their `default` weights."""
    return {
        team: {
            tier: tiers["default"] if CLASS_OF_TIER[tier] in INTERACTIVE_SHAPED else tiers.get(tier, 0.0)
            for tier in SERVICE_TIERS
        }
        for team, tiers in ENTITLEMENTS.items()
    }


def _meta(
    idle: list[float],
    calibrated: Calibration,
    schedule: list[TieredRequest],
    tiered: Phase,
    baseline: Phase,
    rows: list[dict[str, Any]],
    baseline_rows: list[dict[str, Any]],
    config: SwitchyardConfig,
) -> dict[str, Any]:
    by_tier = {str(row["tier"]): row for row in rows}
    idle_ms = median_ms(idle)
    loaded_ms = by_tier["priority"]["ttft_p50_ms"]
    shares = shares_by_tier(tiered.outcomes, ENTITLEMENTS)
    off_share = off_fair_share(shares)
    return {
        "targets_met": targets_met(
            by_tier, {str(r["tier"]): r for r in baseline_rows}, tiered.outcomes, idle_ms, off_share
        ),
        "served_long_per_s": round(calibrated.served_per_s, 2),
        "calibration_refusals": calibrated.refused,
        "overload": overload(),
        "slots": SLOTS,
        "kv_capacity_tokens": config.pools[POOL].engine.kv_capacity_tokens,
        "window_s": WINDOW_S,
        "requests_per_phase": dict(Counter(r.tier for r in schedule)),
        "priority_ttft_idle_p50_ms": idle_ms,
        "priority_ttft_loaded_p50_ms": loaded_ms,
        "priority_ttft_ratio": round(loaded_ms / idle_ms, 2) if idle_ms else None,
        "tier_targets_ms": {t: {"ttft": x.ttft_ms, "tpot": x.tpot_ms} for t, x in TARGETS.items()},
        "entitlements": ENTITLEMENTS,
        "team_shares": shares,
        "off_fair_share": off_share,
        "admission_waits": {c: asdict(w) for c, w in tiered.waits.items()},
        "baseline_admission_waits": {c: asdict(w) for c, w in baseline.waits.items()},
        "cpu_s": {"tiers": tiered.cpu_s, "baseline": baseline.cpu_s},
        "refusals": refusal_groups(tiered.outcomes),
        "baseline_refusals": refusal_groups(baseline.outcomes),
        "failures": failures(tiered.outcomes) + failures(baseline.outcomes),
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": "2 shared cores; other sessions' tests may run beside it",
    }
