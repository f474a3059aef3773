"""GET /v1/usage on the real app (fake backend, real Redis): own team by default, the admin
sees everyone, and the usage recorded through `Metering` is what the route and /metrics show."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from contracts.generation import GenerationDelta, Usage
from quota.usage import UsageRecord
from serving.metering import Metering

Until = Callable[[Callable[[], bool]], Awaitable[None]]

PROMPT = "the quick brown fox"


@dataclass(frozen=True)
class Wired:
    """The app's own metering, and headers with team alpha's key and the admin key."""

    metering: Metering
    alpha: dict[str, str]
    admin: dict[str, str]


@pytest.fixture
def wired(app: FastAPI, team_key: str, admin_key: str) -> Wired:
    metering = app.state.metering
    assert isinstance(metering, Metering)
    return Wired(metering, {"Authorization": f"Bearer {team_key}"}, {"Authorization": f"Bearer {admin_key}"})


def usage(team: str, cls: str = "interactive", **counts: Any) -> UsageRecord:
    return UsageRecord(team_id=team, model_id="small", request_class=cls, **counts)


async def test_a_team_sees_its_own_usage_of_today(client: httpx.AsyncClient, wired: Wired) -> None:
    now = datetime.now(UTC)
    await wired.metering.record(
        usage("alpha", prompt_tokens=12, cached_tokens=4, completion_tokens=3, discarded_tokens=5), now
    )
    await wired.metering.record(usage("alpha", "bulk", completion_tokens=1), now)
    await wired.metering.record(usage("beta", prompt_tokens=99), now)
    await wired.metering.record(usage("alpha", prompt_tokens=1000), now - timedelta(days=2))

    reply = await client.get("/v1/usage", headers=wired.alpha)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["team"] == "alpha" and body["granularity"] == "total"
    assert datetime.fromisoformat(body["start"]) == now.replace(hour=0, minute=0, second=0, microsecond=0)
    assert [(r["class"], r["requests"], r["prompt_tokens"], r["completion_tokens"]) for r in body["data"]] == [
        ("bulk", 1, 0, 1),
        ("interactive", 1, 12, 3),
    ]
    assert body["data"][1] | {"hour": None} == {
        "team": "alpha",
        "model": "small",
        "class": "interactive",
        "service_tier": "default",
        "hour": None,
        "requests": 1,
        "prompt_tokens": 12,
        "cached_tokens": 4,
        "completion_tokens": 3,
        "discarded_tokens": 5,
        "cancelled_requests": 0,
        "kv_token_seconds": 0.0,
    }

    mine = await client.get("/v1/usage", params={"team": "alpha"}, headers=wired.alpha)
    assert mine.json()["data"] == body["data"]
    other = await client.get("/v1/usage", params={"team": "beta"}, headers=wired.alpha)
    assert other.status_code == 403
    assert other.json()["error"]["param"] == "team"


async def test_admin_sees_every_team_over_any_range(client: httpx.AsyncClient, wired: Wired) -> None:
    hour = datetime(2024, 1, 15, 9, tzinfo=UTC)
    await wired.metering.record(usage("alpha", prompt_tokens=5), hour)
    await wired.metering.record(usage("beta", prompt_tokens=7), hour + timedelta(days=60))
    window = {"start": "2024-01-01", "end": "2024-04-01T00:00:00Z"}

    everyone = await client.get("/v1/usage", params=window, headers=wired.admin)
    assert everyone.status_code == 200, everyone.text
    assert [(r["team"], r["prompt_tokens"]) for r in everyone.json()["data"]] == [("alpha", 5), ("beta", 7)]

    beta = await client.get("/v1/usage", params={**window, "team": "beta", "granularity": "hour"}, headers=wired.admin)
    (row,) = beta.json()["data"]
    assert datetime.fromisoformat(row["hour"]) == hour + timedelta(days=60)

    too_long = await client.get("/v1/usage", params=window, headers=wired.alpha)
    assert too_long.status_code == 400
    assert "at most 31 days" in too_long.json()["error"]["message"]


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"start": "2024-02-01", "end": "2024-01-01"}, "end"),
        ({"start": "yesterday"}, "query.start"),  # errors.py keeps the "query." prefix
        ({"granularity": "minute"}, "query.granularity"),
    ],
)
async def test_bad_ranges_are_400(client: httpx.AsyncClient, wired: Wired, params: dict[str, str], param: str) -> None:
    reply = await client.get("/v1/usage", params=params, headers=wired.alpha)
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == param


@pytest.mark.parametrize(
    ("params", "param", "moment"),
    [
        ({"end": "0001-01-01T00:30:00+01:00"}, "end", "0001-01-01T00:30:00+01:00"),  # before year 1 in UTC
        ({"start": "9999-12-31T23:59:59-01:00"}, "start", "9999-12-31T23:59:59-01:00"),  # after year 9999
        ({"start": "0001-01-01T00:00:00+00:01", "end": "2024-01-01"}, "start", "0001-01-01T00:00:00+00:01"),
    ],
)
async def test_a_time_with_no_utc_datetime_is_a_400_naming_the_range(
    client: httpx.AsyncClient, wired: Wired, params: dict[str, str], param: str, moment: str
) -> None:
    for headers in (wired.alpha, wired.admin):
        reply = await client.get("/v1/usage", params=params, headers=headers)
        assert reply.status_code == 400, reply.text  # was a 500 (OverflowError)
        assert reply.json()["error"] == {
            "message": f"{param}: {moment} is not within 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z once in UTC",
            "type": "invalid_request_error",
            "param": param,
            "code": "invalid_request",
        }


async def test_the_ends_of_the_range_are_answered(client: httpx.AsyncClient, wired: Wired) -> None:
    params = {"start": "0001-01-01T00:00:00Z", "end": "9999-12-31T23:59:59Z"}
    reply = await client.get("/v1/usage", params=params, headers=wired.admin)
    assert reply.status_code == 200, reply.text
    assert reply.json()["data"] == []


async def test_end_not_after_start_is_a_400_the_document_describes(client: httpx.AsyncClient, wired: Wired) -> None:
    for end in ("2024-01-01T00:00:00Z", "2023-12-31T23:00:00Z"):
        reply = await client.get("/v1/usage", params={"start": "2024-01-01T00:00:00Z", "end": end}, headers=wired.alpha)
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert (error["param"], error["code"]) == ("end", "invalid_request")
        assert error["message"].startswith(f"end ({datetime.fromisoformat(end).isoformat()}) must be after start")
    operation = (await client.get("/openapi.json")).json()["paths"]["/v1/usage"]["get"]
    refused = operation["responses"]["400"]["description"]
    assert "`end` not after `start`" in refused
    assert "0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z once in UTC" in refused
    assert "more than 31 days" in refused
    descriptions = {p["name"]: p["description"] for p in operation["parameters"]}
    assert "after `start`" in descriptions["end"]


async def test_usage_needs_a_key(anonymous: httpx.AsyncClient) -> None:
    reply = await anonymous.get("/v1/usage")
    assert reply.status_code == 401
    assert reply.json()["error"]["type"] == "authentication_error"


async def test_generations_are_metered_when_they_end_cancelled_ones_too(
    client: httpx.AsyncClient, backend: Any, registry: Any, count_tokens: Callable[[str], int], until: Until
) -> None:
    body = {"model": "small", "prompt": PROMPT, "max_tokens": 9}
    assert (await client.post("/v1/generate", json=body)).status_code == 200
    backend.hold_after = 1
    held = asyncio.create_task(client.post("/v1/generate", json={**body, "class": "bulk", "request_id": "x"}))
    await until(lambda: (e := registry.get("alpha/x")) is not None and bool(e.deltas))
    assert (await client.delete("/v1/generate/x")).json()["status"] == "cancelled"
    await held

    async def rows() -> list[dict[str, Any]]:
        reply = await client.get("/v1/usage")
        assert reply.status_code == 200, reply.text
        return list(reply.json()["data"])

    for _ in range(200):  # the usage is written as each request ends, after its reply
        if len(data := await rows()) == 2:
            break
        await asyncio.sleep(0.01)
    bulk, interactive = data
    prompt_tokens = count_tokens(PROMPT)
    assert {k: v for k, v in interactive.items() if k not in ("hour", "kv_token_seconds")} == {
        "team": "alpha",
        "model": "small",
        "class": "interactive",
        "service_tier": "default",
        "requests": 1,
        "prompt_tokens": prompt_tokens,
        "cached_tokens": 0,
        "completion_tokens": 4,
        "discarded_tokens": 0,
        "cancelled_requests": 0,
    }
    assert (bulk["class"], bulk["requests"], bulk["cancelled_requests"]) == ("bulk", 1, 1)
    assert (bulk["prompt_tokens"], bulk["completion_tokens"]) == (prompt_tokens, 2)  # what it got before the cancel
    assert interactive["kv_token_seconds"] > 0 and bulk["kv_token_seconds"] > 0


async def test_metering_feeds_the_prometheus_counters_too(client: httpx.AsyncClient, wired: Wired) -> None:
    record = UsageRecord(
        team_id="alpha", model_id="small", request_class="bulk", prompt_tokens=9, discarded_tokens=4,
        cancelled=True, kv_token_seconds=2.5,
    )  # fmt: skip
    await wired.metering.record(record, datetime.now(UTC))
    text = (await client.get("/metrics")).text
    labels = 'model="small",request_class="bulk",team="alpha"'
    assert f"switchyard_usage_prompt_tokens_total{{{labels}}} 9.0" in text
    assert f"switchyard_usage_cancelled_requests_total{{{labels}}} 1.0" in text
    assert f"switchyard_usage_kv_token_seconds_total{{{labels}}} 2.5" in text
    assert f"switchyard_usage_discarded_tokens_total{{{labels}}} 4.0" in text


async def test_work_past_a_stop_is_metered_as_discarded_and_not_billed(
    client: httpx.AsyncClient, backend: Any, count_tokens: Callable[[str], int]
) -> None:
    # The server sent the reply's 3 tokens and says its engine wrote 7 more past the stop.
    prompt_tokens = count_tokens(PROMPT)
    backend.deltas = [
        GenerationDelta(text="Hello", token_ids=(5, 6)),
        GenerationDelta(
            text="!", token_ids=(7,), finish_reason="stop", usage=Usage(prompt_tokens, 0, 3, discarded_tokens=7)
        ),
    ]
    reply = await client.post("/v1/completions", json={"model": "small", "prompt": PROMPT, "max_tokens": 20})
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 3

    deadline = asyncio.get_running_loop().time() + 10.0  # usage is written just after the reply
    while not (rows := (await client.get("/v1/usage")).json()["data"]):
        assert asyncio.get_running_loop().time() < deadline, "usage never recorded"
        await asyncio.sleep(0.01)
    assert (rows[0]["completion_tokens"], rows[0]["discarded_tokens"]) == (3, 7)
