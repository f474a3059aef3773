"""What the tiers bench checks and reports beyond its rows (`bench/bench_tiers.py`): the issue's
targets, every refusal grouped with its first message, failures that were not refusals, and the
gateway log's error lines written during the run, so a misbehaving gateway is named precisely."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from bench.tier_phase import RequestOutcome
from contracts.service_tier import FLEX_CAPACITY_UNAVAILABLE

SHARE_TOLERANCE = 0.10
PEOPLE_TIERS = ("priority", "default")  # never refused, by the target


def off_fair_share(shares: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """`tier/team` -> its share and fair share, for each team of a tier with two or more teams
    whose share is more than SHARE_TOLERANCE (relative) off its fair share."""
    return {
        f"{tier}/{team}": s
        for tier, teams in shares.items()
        if len(teams) > 1
        for team, s in teams.items()
        if s["fair"] > 0 and abs(s["share"] / s["fair"] - 1) > SHARE_TOLERANCE
    }


def targets_met(
    rows: dict[str, dict[str, Any]],
    baseline_rows: dict[str, dict[str, Any]],
    tiered: list[RequestOutcome],
    idle_ttft_ms: float,
    off_share: dict[str, dict[str, float]],
) -> dict[str, bool]:
    """The issue's targets, each met or not (rows by tier)."""
    priority = rows["priority"]
    flex_refusals = [r for o in tiered if o.request.tier == "flex" for r in o.refusals]
    return {
        "priority_goodput_ge_0.95": priority["goodput"] >= 0.95,
        "priority_goodput_ge_baseline": priority["goodput"] >= baseline_rows["priority"]["goodput"],
        "priority_ttft_p50_le_2x_idle": priority["ttft_p50_ms"] <= 2 * idle_ttft_ms,
        "flex_refusals_429_retry_after_code": all(
            r.status == 429 and r.retry_after_s is not None and r.code == FLEX_CAPACITY_UNAVAILABLE
            for r in flex_refusals
        ),
        "priority_and_default_never_refused": not any(o.refusals for o in tiered if o.request.tier in PEOPLE_TIERS),
        "teams_within_10pct_of_fair_share": not off_share,
    }


def refusal_groups(outcomes: list[RequestOutcome]) -> list[dict[str, Any]]:
    """Every refused attempt, grouped by tier, team, status, code and whether Retry-After came:
    a count and the first message of each."""
    seen: Counter[tuple[str, str, int, str | None, bool]] = Counter()
    first: dict[tuple[str, str, int, str | None, bool], str] = {}
    for o in outcomes:
        for r in o.refusals:
            key = (o.request.tier, o.request.team, r.status, r.code, r.retry_after_s is not None)
            seen[key] += 1
            first.setdefault(key, r.message)
    return [
        {"tier": k[0], "team": k[1], "status": k[2], "code": k[3], "retry_after": k[4], "attempts": n,
         "first_message": first[k]}
        for k, n in sorted(seen.items())
    ]  # fmt: skip


def failures(outcomes: list[RequestOutcome]) -> list[dict[str, Any]]:
    """Requests that failed other than by a refusal (a stream cut, an SSE error): the first ten."""
    failed = [o for o in outcomes if o.failed is not None]
    return [{"tier": o.request.tier, "team": o.request.team, "error": o.failed} for o in failed[:10]]


def log_size(path: Path) -> int:
    """Where the run's lines will start in an appended log (0: none yet)."""
    return path.stat().st_size if path.exists() else 0


def error_lines(path: Path, offset: int) -> list[str]:
    """The log's error lines (level ERROR, a traceback, a 500) written after `offset`: the last twenty."""
    if not path.exists():
        return []
    with path.open("rb") as log:
        log.seek(offset)
        lines = log.read().decode(errors="replace").splitlines()
    marks = ('"level": "ERROR"', "Traceback", '"status": 500')
    return [line for line in lines if any(mark in line for mark in marks)][-20:]
