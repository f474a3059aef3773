"""The usage page: hourly charts per metric by model and class, the team's share, totals, CSV.

    GET /console/usage?window=24h|7d[&team=T]    team T: the operator only; a team sees its own
    GET /console/usage.csv?window=24h|7d[&team=T]

Read from the same meter as `GET /v1/usage` (quota/usage.py: one ZRANGEBYSCORE and an HGETALL
per used hour), with the same window: the page prints the start and end to ask the API with.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

import redis
from fastapi import APIRouter, Request
from fastapi.responses import Response

from contracts.caller_echo import echoed
from gateway.console.access import ConsoleDep, ConsoleRefusal, SessionDep
from gateway.console.charts import ChartSeries, colour, stacked_bars
from gateway.console.sessions import ConsoleSession
from gateway.console.usage_view import (
    CHARTED,
    WINDOWS,
    UsageWindow,
    build_usage_view,
    team_share,
    usage_csv,
    usage_window,
)
from gateway.deps import MeteringDep
from quota.usage import UsageRow

router = APIRouter(prefix="/console", include_in_schema=False)


def _team(session: ConsoleSession, asked: str | None, known: Collection[str]) -> str | None:
    """The team the page shows: a team's session its own; the operator any (None: all)."""
    if not session.is_admin:
        if asked is not None and asked != session.team_id:
            raise ConsoleRefusal(403, "you see your own team's usage only")
        return session.team_id
    if asked is None or asked == "":
        return None
    if asked not in known:
        raise ConsoleRefusal(400, f"no team {echoed(asked)} in switchyard.yaml")
    return asked


def _window(name: str) -> UsageWindow:
    try:
        return usage_window(name, datetime.now(UTC))
    except ValueError as exc:
        raise ConsoleRefusal(400, str(exc)) from None


async def _rows(metering: MeteringDep, team_id: str | None, window: UsageWindow) -> list[UsageRow]:
    try:
        return await metering.meter.query(team_id, window.start, window.end, by_hour=True)
    except redis.RedisError:
        raise ConsoleRefusal(503, "usage is unavailable right now; retry shortly") from None


@router.get("/usage")
async def usage_page(
    request: Request,
    console: ConsoleDep,
    session: SessionDep,
    metering: MeteringDep,
    window: str = "24h",
    team: str | None = None,
) -> Response:
    teams = dict(console.config.teams)
    team_id = _team(session, team, teams)
    span = _window(window)
    rows = await _rows(metering, team_id, span)
    share_fraction, kv_share = (
        (None, None) if team_id is None else team_share(console.config, team_id, console.capacity)
    )
    view = build_usage_view(span, rows, kv_share, share_fraction)
    charts = [
        stacked_bars(
            f"chart-{metric}", title, span.hours,
            [ChartSeries(s.label, s.per_hour[metric]) for s in view.series],
            share=view.kv_share_per_hour if metric == "kv_token_seconds" else None,
        )
        for metric, title in CHARTED
    ]  # fmt: skip
    return console.pages.render(
        request, "usage.html", session, view=view, charts=charts, windows=list(WINDOWS), team_id=team_id,
        teams=sorted(teams), colours=[colour(i) for i in range(len(view.series))],
    )  # fmt: skip


@router.get("/usage.csv")
async def usage_csv_download(
    console: ConsoleDep, session: SessionDep, metering: MeteringDep, window: str = "24h", team: str | None = None
) -> Response:
    team_id = _team(session, team, dict(console.config.teams))
    span = _window(window)
    rows = await _rows(metering, team_id, span)
    filename = f"usage-{team_id or 'all'}-{span.name}-{span.end:%Y%m%dT%H%M}.csv"
    return Response(
        usage_csv(rows),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"},
    )
