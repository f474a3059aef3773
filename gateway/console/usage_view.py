"""The usage page's numbers: a team's hourly usage (from the same Redis meter as `/v1/usage`)
laid out per metric and per model·class series, with totals, its share, and a CSV.

    window "24h": the current hour and the 23 before it     (24 hourly bars)
           "7d":  the current hour and the 167 before it    (168 hourly bars)
    start = the first hour's start, end = now: `/v1/usage?start=START&end=END` gives the same totals.

The share: a team's static share (weight / Σ weights) of the KV capacity of the pools it may
use, in KV token-seconds per hour (capacity × 3600 × share): the KV time the team is owed
whatever the others do. It is today's capacity, drawn across the whole window.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from config.settings import SwitchyardConfig
from contracts.service_tier import tier_of
from quota.capacity import CapacitySource
from quota.usage import UsageRow, hour_start, sum_rows

WINDOWS = {"24h": 24, "7d": 7 * 24}
# (field of UsageRow, what a chart is titled)
CHARTED = (
    ("requests", "Requests"),
    ("prompt_tokens", "Prompt tokens"),
    ("cached_tokens", "Cached tokens"),
    ("completion_tokens", "Completion tokens"),
    ("kv_token_seconds", "KV token-seconds"),
)
CSV_COLUMNS = (
    "hour", "team", "model", "class", "requests", "prompt_tokens", "cached_tokens", "completion_tokens",
    "discarded_tokens", "cancelled_requests", "kv_token_seconds",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class UsageWindow:
    """The hours a page shows: [start, end), `hours` their starts, oldest first."""

    name: str
    start: datetime
    end: datetime
    hours: tuple[datetime, ...]


def usage_window(name: str, now: datetime) -> UsageWindow:
    """The window called `name` ("24h" or "7d") ending now; ValueError for another name."""
    if name not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {name!r}")
    count = WINDOWS[name]
    first = hour_start(now) - timedelta(hours=count - 1)
    return UsageWindow(name, first, now, tuple(first + timedelta(hours=i) for i in range(count)))


@dataclass(frozen=True, slots=True)
class Series:
    """One model and class: its value per hour of the window for each charted metric."""

    model_id: str
    request_class: str
    per_hour: dict[str, list[float]]
    totals: dict[str, int | float]

    @property
    def label(self) -> str:
        return f"{self.model_id} · {tier_of(self.request_class)}"


@dataclass(frozen=True, slots=True)
class UsageView:
    window: UsageWindow
    series: list[Series]
    totals: dict[str, int | float]
    kv_share_per_hour: float | None  # None: no share to draw (every team, or no capacity known)
    share_fraction: float | None
    charted: Sequence[tuple[str, str]] = field(default=CHARTED)


def build_usage_view(
    window: UsageWindow, rows: Iterable[UsageRow], kv_share_per_hour: float | None, share_fraction: float | None
) -> UsageView:
    """Lay hourly `rows` (`UsageMeter.query(..., by_hour=True)`, one team or all) out per series."""
    rows = list(rows)
    slot = {hour: index for index, hour in enumerate(window.hours)}
    grouped: dict[tuple[str, str], list[UsageRow]] = {}
    for row in rows:
        grouped.setdefault((row.model_id, row.request_class), []).append(row)
    series: list[Series] = []
    for (model_id, request_class), group in sorted(grouped.items()):
        per_hour = {metric: [0.0] * len(window.hours) for metric, _ in CHARTED}
        for row in group:
            index = slot.get(row.hour) if row.hour is not None else None
            if index is None:
                continue
            for metric, _ in CHARTED:
                per_hour[metric][index] += float(getattr(row, metric))
        series.append(Series(model_id, request_class, per_hour, sum_rows(group)))
    return UsageView(window, series, sum_rows(rows), kv_share_per_hour, share_fraction)


def team_share(config: SwitchyardConfig, team_id: str, capacity: CapacitySource) -> tuple[float, float | None]:
    """(the team's static share of the fleet, its KV token-seconds per hour of the pools it may
    use at today's capacity, or None when no pool reports capacity)."""
    weights = sum(spec.weight for spec in config.teams.values())
    spec = config.teams[team_id]
    fraction = spec.weight / weights if weights > 0 else 0.0
    tokens = sum(
        capacity.capacity(pool_id).capacity_tokens
        for pool_id, pool in config.pools.items()
        if spec.may_use(pool.model_id)
    )
    return fraction, (tokens * 3600.0 * fraction if tokens > 0 else None)


def usage_csv(rows: Iterable[UsageRow]) -> str:
    """Hourly rows as CSV, one line per team, hour, model and class (what the page charts)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        hour = "" if row.hour is None else row.hour.strftime("%Y-%m-%dT%H:00:00Z")
        writer.writerow(
            [
                hour, _cell(row.team_id), _cell(row.model_id), _cell(row.request_class), row.requests,
                row.prompt_tokens, row.cached_tokens, row.completion_tokens, row.discarded_tokens, row.cancelled,
                repr(row.kv_token_seconds),
            ]
        )  # fmt: skip
    return out.getvalue()


def _cell(text: str) -> str:
    """A text cell a spreadsheet will not run as a formula (CSV injection)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
