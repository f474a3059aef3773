"""GET /v1/usage: what a team used, per model, class (and hour), from the Redis meter.

A team's key sees its own team, up to 31 days per query; the admin key sees every team (or
one, with `team=`) over any range. Times are ISO 8601 or epoch seconds, UTC when no zone is
given, from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z once in UTC; hours overlapping
[start, end) count. Default: today so far (UTC). Every refusal is a 400 that says which rule:

    start or end outside the range once in UTC   (0001-01-01T00:30+01:00 is 0000-12-31 UTC)
    end not after start
    a team's key asking for more than 31 days
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

import redis
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from contracts.errors import ApiError, invalid_request
from contracts.schemas import ErrorBody
from contracts.service_tier import tier_of
from gateway.auth import PrincipalDep
from gateway.deps import MeteringDep
from quota.usage import UTC_RANGE_TEXT, UsageRow, as_utc
from serving.principal import forbidden

router = APIRouter(prefix="/v1/usage", tags=["usage"])

TEAM_MAX_RANGE = timedelta(days=31)
_ERRORS: dict[int | str, dict[str, object]] = {code: {"model": ErrorBody} for code in (401, 403, 503)}
_ERRORS |= {
    400: {
        "model": ErrorBody,
        "description": f"A time that is not a time, or not within {UTC_RANGE_TEXT} once in UTC; `end` not "
        f"after `start`; a team's key asking for more than {TEAM_MAX_RANGE.days} days. The message says which.",
    }
}
_TIME = f"ISO 8601 or epoch seconds (UTC without a zone), within {UTC_RANGE_TEXT} once in UTC"


class UsageRowBody(BaseModel):
    team: str
    model: str
    request_class: str = Field(serialization_alias="class")
    service_tier: str = Field(description="the tier (docs/tiers.md) of `class`: priority, default, flex or batch")
    hour: datetime | None = Field(None, description="start of the hour (UTC) with granularity=hour")
    requests: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    discarded_tokens: int = Field(description="engine work past a reply's end (a stop string); not billed")
    cancelled_requests: int
    kv_token_seconds: float

    @classmethod
    def of(cls, row: UsageRow) -> UsageRowBody:
        return cls(
            team=row.team_id,
            model=row.model_id,
            request_class=row.request_class,
            service_tier=tier_of(row.request_class),
            hour=row.hour,
            requests=row.requests,
            prompt_tokens=row.prompt_tokens,
            cached_tokens=row.cached_tokens,
            completion_tokens=row.completion_tokens,
            discarded_tokens=row.discarded_tokens,
            cancelled_requests=row.cancelled,
            kv_token_seconds=row.kv_token_seconds,
        )


class UsageReport(BaseModel):
    object: Literal["usage"] = "usage"
    start: datetime
    end: datetime
    team: str | None = Field(description="the team asked for; null: every team (admin only)")
    granularity: Literal["total", "hour"]
    data: list[UsageRowBody]


@router.get("", response_model=UsageReport, responses=_ERRORS)
async def get_usage(
    principal: PrincipalDep,
    metering: MeteringDep,
    start: Annotated[datetime | None, Query(description=f"{_TIME}; default: 00:00 UTC today")] = None,
    end: Annotated[datetime | None, Query(description=f"{_TIME}, after `start`; default: now")] = None,
    team: Annotated[str | None, Query(description="admin: one team (default all); teams: their own")] = None,
    granularity: Annotated[Literal["total", "hour"], Query(description="one row per hour with 'hour'")] = "total",
) -> UsageReport:
    """Usage per team, model and class: requests, prompt, cached and completion tokens,
    discarded tokens (engine work past a stop string, not billed), cancelled requests and KV
    token-seconds."""
    now = datetime.now(UTC)
    end_at = _utc(end, "end") if end is not None else now
    start_at = _utc(start, "start") if start is not None else now.replace(hour=0, minute=0, second=0, microsecond=0)
    if end_at <= start_at:
        raise invalid_request(f"end ({end_at.isoformat()}) must be after start ({start_at.isoformat()})", "end")
    team_id = _team_to_query(principal.team_id, principal.is_admin, team)
    if not principal.is_admin and end_at - start_at > TEAM_MAX_RANGE:
        raise invalid_request(
            f"a team may query at most {TEAM_MAX_RANGE.days} days at a time; split the range "
            "(the admin key has no such limit)",
            "start",
        )
    try:
        rows = await metering.meter.query(team_id, start_at, end_at, by_hour=granularity == "hour")
    except redis.RedisError:
        raise ApiError(
            503, "service_unavailable", "usage is unavailable right now; retry shortly", None, {"Retry-After": "1"}
        ) from None
    return UsageReport(
        start=start_at, end=end_at, team=team_id, granularity=granularity, data=[UsageRowBody.of(r) for r in rows]
    )


def _utc(moment: datetime, param: str) -> datetime:
    """The query's `param` in UTC; a 400 naming the accepted range when it has no UTC datetime."""
    try:
        return as_utc(moment)
    except ValueError as exc:
        raise invalid_request(f"{param}: {exc}", param) from None


def _team_to_query(own_team: str | None, is_admin: bool, asked: str | None) -> str | None:
    if is_admin:
        return asked
    if asked is not None and asked != own_team:
        raise forbidden(f"your key belongs to team {own_team!r}; only the admin key sees other teams", "team")
    return own_team
