"""The gateway's side of usage metering: one call at the end of a request writes its usage to
Redis (the bill, `GET /v1/usage`) and to the Prometheus counters on `/metrics` alike.

    create_app:  app.state.metrics = GatewayMetrics()
    lifespan:    install_metering(app, UsageMeter(redis_client))   -> app.state.metering
    a request:   await metering.record(request_usage(entry, ...), at=finished_at, door="http")

`request_usage` reads an ended `InflightRequest` into the plain values of the usage formula
(`quota/usage_formula.py`: tokens, cached, discarded, KV token-seconds); the request's
lifecycle (`serving/request_lifecycle.py`) meters it once, at its end.

`door` is the protocol the request came through (`http`, or `grpc`: the front door,
gateway/grpc_door/): `switchyard_usage_door_*{team, model, door}` count requests and tokens per
door. The bill in Redis is the team's whatever the door.
"""

from __future__ import annotations

import logging
from datetime import datetime

import redis
from prometheus_client import CollectorRegistry, Counter

from quota import usage_formula
from quota.usage import UsageMeter, UsageRecord
from quota.usage_counters import UsageCounters
from serving.redis_retry import UNREACHABLE_RETRY_S, until_reachable
from serving.requests_registry import InflightRequest

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
