"""Usage metering against a real redis-server: hour buckets, ranges, teams, the day counter,
concurrent writers, and the Prometheus counters carrying the same figures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import redis.asyncio
from prometheus_client import CollectorRegistry

from quota.usage import (
    EARLIEST,
    LATEST,
    RECORD_ONCE_TTL_S,
    UTC_RANGE_TEXT,
    UsageMeter,
    UsageRecord,
    UsageRow,
    as_utc,
    sum_rows,
)
from quota.usage_counters import UsageCounters

T0 = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)


@pytest.fixture
async def meter(redis_url: str) -> AsyncIterator[UsageMeter]:
    client = redis.asyncio.Redis.from_url(redis_url)
    yield UsageMeter(client)
    await client.aclose()


def rec(team: str = "alpha", model: str = "small", cls: str = "interactive", **counts: Any) -> UsageRecord:
    return UsageRecord(team_id=team, model_id=model, request_class=cls, **counts)


async def test_records_add_up_per_team_model_and_class(meter: UsageMeter) -> None:
    await meter.record(rec(prompt_tokens=100, cached_tokens=32, completion_tokens=10, kv_token_seconds=1.5), T0)
    await meter.record(rec(prompt_tokens=50, completion_tokens=5, cancelled=True, kv_token_seconds=0.25), T0)
    await meter.record(rec(cls="bulk", prompt_tokens=7, completion_tokens=3), T0 + timedelta(minutes=30))
    await meter.record(rec(model="large", prompt_tokens=1), T0 + timedelta(minutes=59))

    rows = await meter.query("alpha", T0, T0 + timedelta(hours=1))
    assert rows == [
        UsageRow("alpha", "large", "interactive", None, 1, 1, 0, 0, 0, 0.0),
        UsageRow("alpha", "small", "bulk", None, 1, 7, 0, 3, 0, 0.0),
        UsageRow("alpha", "small", "interactive", None, 2, 150, 32, 15, 1, 1.75),
    ]
    assert sum_rows(rows)["prompt_tokens"] == 158


async def test_a_record_with_an_id_counts_once_however_often_it_is_sent(meter: UsageMeter, redis_url: str) -> None:
    first = rec(prompt_tokens=100, completion_tokens=10, record_id="lease-1")
    assert await meter.record(first, T0) is True
    assert await meter.record(first, T0) is False  # a retry after a broken connection
    assert await meter.record(rec(prompt_tokens=1, completion_tokens=2, record_id="lease-2"), T0) is True
    assert await meter.record(rec(prompt_tokens=5), T0) is True  # no id: counted each time
    assert await meter.record(rec(prompt_tokens=5), T0) is True
    (row,) = await meter.query("alpha", T0, T0 + timedelta(hours=1))
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (4, 111, 12)
    assert await meter.tokens_today("alpha", T0) == 123
    client = redis.asyncio.Redis.from_url(redis_url)
    ttl = await client.ttl("sy:usage:once:lease-1")
    await client.aclose()
    assert 0 < ttl <= RECORD_ONCE_TTL_S  # the marker lapses: it is not the bill


async def test_query_counts_the_hours_that_overlap_the_range(meter: UsageMeter) -> None:
    await meter.record(rec(prompt_tokens=1), T0 + timedelta(minutes=59, seconds=59))  # hour 10
    await meter.record(rec(prompt_tokens=2), T0 + timedelta(hours=1))  # hour 11
    await meter.record(rec(prompt_tokens=4), T0 + timedelta(days=1))  # the next day, hour 10

    async def prompt_tokens(start: datetime, end: datetime) -> int:
        return sum(row.prompt_tokens for row in await meter.query("alpha", start, end))

    assert await prompt_tokens(T0 + timedelta(minutes=30), T0 + timedelta(hours=1)) == 1
    assert await prompt_tokens(T0 + timedelta(hours=1), T0 + timedelta(hours=1, seconds=1)) == 2
    assert await prompt_tokens(T0, T0 + timedelta(days=2)) == 7
    assert await prompt_tokens(T0 - timedelta(days=400), T0) == 0
    assert await prompt_tokens(T0 + timedelta(hours=2), T0 + timedelta(hours=1)) == 0

    hourly = await meter.query("alpha", T0, T0 + timedelta(days=2), by_hour=True)
    assert [(row.hour, row.prompt_tokens) for row in hourly] == [
        (T0, 1),
        (T0 + timedelta(hours=1), 2),
        (T0 + timedelta(days=1), 4),
    ]


async def test_times_in_other_zones_and_naive_times_are_utc(meter: UsageMeter) -> None:
    await meter.record(rec(prompt_tokens=3), datetime(2025, 3, 4, 12, 15, tzinfo=timezone(timedelta(hours=2))))
    (row,) = await meter.query("alpha", datetime(2025, 3, 4, 10), datetime(2025, 3, 4, 11), by_hour=True)
    assert row.hour == T0 and row.prompt_tokens == 3


@pytest.mark.parametrize(
    "moment",
    [
        datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1))),  # 0000-12-31T23:30Z
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-1))),  # 10000-01-01T00:59:59Z
    ],
)
def test_a_moment_past_what_utc_can_hold_is_a_value_error_naming_the_range(moment: datetime) -> None:
    with pytest.raises(ValueError) as refused:
        as_utc(moment)
    assert str(refused.value) == (
        f"{moment.isoformat()} is not within 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z once in UTC"
    )
    assert UTC_RANGE_TEXT == "0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z"


def test_the_ends_of_the_range_are_utc_moments() -> None:
    assert as_utc(datetime(1, 1, 1)) == EARLIEST
    assert as_utc(datetime(1, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))) == EARLIEST
    assert as_utc(datetime.max.replace(tzinfo=UTC)) == LATEST


async def test_all_teams_or_one(meter: UsageMeter) -> None:
    await meter.record(rec("beta", completion_tokens=2), T0)
    await meter.record(rec("alpha", completion_tokens=1), T0)
    assert await meter.teams() == ["alpha", "beta"]
    everyone = await meter.query(None, T0, T0 + timedelta(hours=1))
    assert [(row.team_id, row.completion_tokens) for row in everyone] == [("alpha", 1), ("beta", 2)]
    assert [row.team_id for row in await meter.query("beta", T0, T0 + timedelta(hours=1))] == ["beta"]
    assert await meter.query("nobody", T0, T0 + timedelta(hours=1)) == []


async def test_tokens_today_counts_prompt_and_completion_since_midnight_utc(meter: UsageMeter) -> None:
    await meter.record(rec(prompt_tokens=100, cached_tokens=50, completion_tokens=20), T0)
    await meter.record(rec(model="large", cls="bulk", prompt_tokens=5, completion_tokens=5), T0 + timedelta(hours=13))
    await meter.record(rec(prompt_tokens=1000), T0 - timedelta(hours=11))  # 23:00 the day before
    assert await meter.tokens_today("alpha", now=T0 + timedelta(hours=13)) == 130
    assert await meter.tokens_today("alpha", now=T0 - timedelta(hours=11)) == 1000
    assert await meter.tokens_today("beta", now=T0) == 0


async def test_concurrent_writers_lose_nothing(redis_url: str) -> None:
    clients = [redis.asyncio.Redis.from_url(redis_url) for _ in range(4)]
    meters = [UsageMeter(client) for client in clients]
    try:
        await asyncio.gather(
            *(
                meters[i % 4].record(rec(prompt_tokens=3, completion_tokens=1, kv_token_seconds=0.5), T0)
                for i in range(200)
            )
        )
        (row,) = await meters[0].query("alpha", T0, T0 + timedelta(hours=1))
    finally:
        for client in clients:
            await client.aclose()
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (200, 600, 200)
    assert row.kv_token_seconds == pytest.approx(100.0)


def test_records_refuse_impossible_figures() -> None:
    with pytest.raises(ValueError, match="negative"):
        rec(prompt_tokens=-1)
    with pytest.raises(ValueError, match="negative"):
        rec(kv_token_seconds=-0.1)
    with pytest.raises(ValueError, match="exceed"):
        rec(prompt_tokens=3, cached_tokens=4)


def test_prometheus_counters_carry_the_same_figures() -> None:
    registry = CollectorRegistry()
    counters = UsageCounters(registry)
    counters.observe(rec(prompt_tokens=100, cached_tokens=32, completion_tokens=10, kv_token_seconds=1.5))
    counters.observe(rec(prompt_tokens=50, completion_tokens=5, cancelled=True, kv_token_seconds=0.25))
    labels = {"team": "alpha", "model": "small", "request_class": "interactive"}

    def value(name: str) -> float | None:
        return registry.get_sample_value(f"switchyard_usage_{name}_total", labels)

    assert value("requests") == 2
    assert value("prompt_tokens") == 150
    assert value("cached_tokens") == 32
    assert value("completion_tokens") == 15
    assert value("cancelled_requests") == 1
    assert value("kv_token_seconds") == pytest.approx(1.75)
