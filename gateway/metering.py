"""The gateway's side of usage metering: one call at the end of a request writes its usage to
Redis (the bill, `GET /v1/usage`) and to the Prometheus counters on `/metrics` alike.

    create_app:  app.state.metrics = GatewayMetrics()
    lifespan:    install_metering(app, UsageMeter(redis_client))   -> app.state.metering
    a request:   await metering.record(request_usage(entry, ...), at=finished_at, door="http")

`request_usage` reads an ended `InflightRequest` into the plain values of the usage formula
(`quota/usage_formula.py`: tokens, cached, discarded, KV token-seconds); the request's
lifecycle (`gateway/request_lifecycle.py`) meters it once, at its end.

`door` is the protocol the request came through (`http`, or `grpc`: the front door,
gateway/grpc_door/): `switchyard_usage_door_*{team, model, door}` count requests and tokens per
door. The bill in Redis is the team's whatever the door.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated

import redis
from fastapi import Depends, FastAPI, Request
from prometheus_client import CollectorRegistry, Counter

from gateway.redis_retry import UNREACHABLE_RETRY_S, until_reachable
from gateway.requests_registry import InflightRequest
from quota import usage_formula
from quota.usage import UsageMeter, UsageRecord
from quota.usage_counters import UsageCounters

METERING_STATE = "metering"  # app.state.metering: the Metering of this app
_COUNTERS_STATE = "usage_counters"  # made once per app: a registry refuses a second copy
_DOOR_COUNTERS_STATE = "usage_door_counters"

logger = logging.getLogger(__name__)


class DoorCounters:
    """`switchyard_usage_door_requests_total` and `..._door_tokens_total` (kind: prompt,
    completion): which door a team's usage came through."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("team", "model", "door")
        self.requests = Counter(
            "switchyard_usage_door_requests", "Requests that ended, by the door they came through.", labels,
            registry=registry,
        )  # fmt: skip
        self.tokens = Counter(
            "switchyard_usage_door_tokens", "Prompt and completion tokens of ended requests, by door.",
            [*labels, "kind"], registry=registry,
        )  # fmt: skip

    def observe(self, rec: UsageRecord, door: str) -> None:
        self.requests.labels(rec.team_id, rec.model_id, door).inc(rec.requests)
        self.tokens.labels(rec.team_id, rec.model_id, door, "prompt").inc(rec.prompt_tokens)
        self.tokens.labels(rec.team_id, rec.model_id, door, "completion").inc(rec.completion_tokens)


class Metering:
    """Records usage in Redis and in this process's Prometheus counters."""

    def __init__(
        self,
        meter: UsageMeter,
        counters: UsageCounters,
        doors: DoorCounters | None = None,
        *,
        retry_s: float = UNREACHABLE_RETRY_S,
    ) -> None:
        self.meter = meter
        self.counters = counters
        self.doors = doors
        self.retry_s = retry_s

    async def record(self, rec: UsageRecord, at: datetime, door: str = "http") -> None:
        """Count `rec` (ended at `at`, came through `door`). While Redis cannot be reached (a
        restart, a failover) the write is tried again, backing off, for `retry_s`: the bill
        must not lose a reply served meanwhile (the chaos run's restart-redis fault lost
        them). Any other Redis failure, or one that outlasts `retry_s`, is logged, not raised:
        the reply has been served, and failing it now would bill nothing and help no one.

        The write is one script, applied whole or not at all, and a record with a
        `record_id` (every request's: its lease's id) counts once however often it is sent,
        so a retry after a connection that broke once Redis had run it counts nothing twice."""
        self.counters.observe(rec)
        if self.doors is not None:
            self.doors.observe(rec, door)
        extra = {"team": rec.team_id, "model": rec.model_id, "request_class": rec.request_class}
        try:
            await until_reachable(lambda: self.meter.record(rec, at), what="usage", retry_s=self.retry_s, extra=extra)
        except redis.RedisError as exc:
            logger.error("usage not recorded in redis", extra=extra, exc_info=exc)


def request_usage(
    entry: InflightRequest,
    *,
    team_id: str,
    request_class: str,
    record_id: str,
    ended_at: float,
    delivered: bool = True,
    billed_before: int = 0,
) -> UsageRecord:
    """What the ended `entry` used, `ended_at` on the clock of its `started_at` (monotonic).
    `record_id`: its lease's id (one lease per generation: a resent record counts once).
    `delivered` False: its reply reached no one, so its tokens are discarded, not billed.
    `billed_before`: tokens of its reply an earlier generation of its id billed (it resumed
    that one): not counted again."""
    usage = entry.usage
    return usage_formula.request_usage(
        team_id=team_id,
        model_id=entry.request.model_id,
        request_class=request_class,
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=usage.cached_tokens,
        completion_tokens=max(0, usage.completion_tokens - billed_before),
        discarded_tokens=usage.discarded_tokens,
        cancelled=entry.stop_reason == "cancelled",
        started_at=entry.started_at,
        first_token_at=entry.first_token_at,
        ended_at=ended_at,
        record_id=record_id,
        delivered=delivered,
    )


def install_metering(app: FastAPI, meter: UsageMeter) -> Metering:
    """Put a `Metering` over `meter` in `app.state.metering` (call from the lifespan). The
    counters go in the registry of `app.state.metrics` and are made once per app, so a
    lifespan that runs twice (tests) does not register them twice."""
    counters = getattr(app.state, _COUNTERS_STATE, None)
    if not isinstance(counters, UsageCounters):
        registry = getattr(getattr(app.state, "metrics", None), "registry", None)
        if not isinstance(registry, CollectorRegistry):
            raise RuntimeError("install_metering needs app.state.metrics (a GatewayMetrics) first")
        counters = UsageCounters(registry)
        setattr(app.state, _COUNTERS_STATE, counters)
        setattr(app.state, _DOOR_COUNTERS_STATE, DoorCounters(registry))
    metering = Metering(meter, counters, getattr(app.state, _DOOR_COUNTERS_STATE, None))
    setattr(app.state, METERING_STATE, metering)
    return metering


async def get_metering(request: Request) -> Metering:
    metering = getattr(request.app.state, METERING_STATE, None)
    if not isinstance(metering, Metering):
        raise RuntimeError("no metering: call gateway.metering.install_metering(app, meter) in the lifespan")
    return metering


MeteringDep = Annotated[Metering, Depends(get_metering)]
