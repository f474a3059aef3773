"""The console's pages on the real app (fake backend, real Redis): usage as /v1/usage counts
it, a team held to its own batches, files and usage, operator pages for the admin key only,
keys made and revoked, the fleet and a drain, CSRF on every form, and every page under 300 KB."""

from __future__ import annotations

import csv
import io
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI

from contracts.engine_metrics import EngineHealth
from fleet_state.load_board import LoadReport
from fleet_state.pool_targets import PoolTarget
from fleet_state.registry import ServerInfo, ServerRegistry
from fleet_state.server_state import ServerState
from gateway.console.access import ConsoleState
from gateway.console.pages import MAX_PAGE_BYTES
from quota.usage import UsageRecord
from serving.metering import Metering

BrowserFactory = Callable[[str], AsyncIterator[httpx.AsyncClient]]


@pytest.fixture
async def signed_in(app: FastAPI) -> AsyncIterator[Callable[[str], httpx.AsyncClient]]:
    """`await signed_in(key)`: a cookie-keeping client signed in to the console with `key`."""
    clients: list[httpx.AsyncClient] = []

    async def make(key: str) -> httpx.AsyncClient:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")
        clients.append(http)
        reply = await http.post("/console/signin", data={"key": key})
        assert reply.status_code == 303, reply.text
        return http

    yield make  # type: ignore[misc]
    for http in clients:
        await http.aclose()


def csrf_of(html: str) -> str:
    match = re.search(r'(?:name="csrf" value|data-csrf)="([^"]+)"', html)
    assert match, "no CSRF token on the page"
    return match.group(1)


def jsonl(*lines: object) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def totals_on_page(html: str) -> dict[tuple[str, str], dict[str, str]]:
    """The totals table: (model, class) -> metric -> the number as shown."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for model, cls, body in re.findall(r'<tr data-model="([^"]+)" data-class="([^"]+)">(.*?)</tr>', html, re.S):
        rows[(model, cls)] = dict(re.findall(r'<td data-metric="([a-z_]+)">([^<]*)</td>', body))
    return rows


async def record(app: FastAPI, team: str, model: str, cls: str, at: datetime, **counts: float) -> None:
    metering = app.state.metering
    assert isinstance(metering, Metering)
    await metering.record(UsageRecord(team_id=team, model_id=model, request_class=cls, **counts), at)  # type: ignore[arg-type]


async def test_the_usage_page_shows_what_v1_usage_returns_and_nothing_of_other_teams(
    app: FastAPI, signed_in: Callable[..., httpx.AsyncClient], client: httpx.AsyncClient, team_key: str
) -> None:
    now = datetime.now(UTC)
    await record(app, "alpha", "small", "interactive", now, prompt_tokens=120, cached_tokens=40, completion_tokens=31)
    await record(app, "alpha", "small", "bulk", now - timedelta(hours=3), completion_tokens=7, kv_token_seconds=2.5)
    await record(app, "alpha", "large", "interactive", now - timedelta(days=3), prompt_tokens=1000)
    await record(app, "beta", "small", "interactive", now, prompt_tokens=99_999)
    browser = await signed_in(team_key)
    page = await browser.get("/console/usage?window=24h")
    assert page.status_code == 200
    start = re.search(r'data-start="([^"]+)"', page.text)
    end = re.search(r'data-end="([^"]+)"', page.text)
    assert start and end
    api = await client.get("/v1/usage", params={"start": start.group(1), "end": end.group(1)})
    expected = {(r["model"], r["class"]): r for r in api.json()["data"]}
    shown = totals_on_page(page.text)
    assert set(shown) == set(expected) == {("small", "interactive"), ("small", "bulk")}
    for series, row in expected.items():
        for metric in ("requests", "prompt_tokens", "cached_tokens", "completion_tokens"):
            assert shown[series][metric].replace(",", "") == str(row[metric]), (series, metric)
    assert 'data-series="small · default" data-total="120"' in page.text  # the prompt chart's bars
    assert "99,999" not in page.text and "99999" not in page.text and "beta" not in page.text
    assert "share of the fleet: 50.0%" in page.text and "data-share=" in page.text  # alpha: weight 1 of 2
    week = await browser.get("/console/usage?window=7d")
    assert ("large", "interactive") in totals_on_page(week.text)
    assert (await browser.get("/console/usage?team=beta")).status_code == 403
    assert (await browser.get("/console/usage?window=1y")).status_code == 400
    download = await browser.get("/console/usage.csv?window=24h")
    assert download.headers["content-type"].startswith("text/csv")
    lines = list(csv.DictReader(io.StringIO(download.text)))
    assert {(r["team"], r["model"], r["class"], r["prompt_tokens"]) for r in lines} == {
        ("alpha", "small", "interactive", "120"),
        ("alpha", "small", "bulk", "0"),
    }


async def test_a_team_key_cannot_open_operator_pages(
    signed_in: Callable[..., httpx.AsyncClient], team_key: str, admin_key: str
) -> None:
    team = await signed_in(team_key)
    for path in ("/console/keys", "/console/fleet", "/console/fleet/pools", "/console/fleet/servers/s1/drain"):
        reply = await team.get(path)
        assert reply.status_code == 403, path
        assert "for operators" in reply.text
    page = await team.get("/console/usage")
    refused = await team.post("/console/keys", data={"team": "alpha", "csrf": csrf_of(page.text)})
    assert refused.status_code == 403
    admin = await signed_in(admin_key)
    assert (await admin.get("/console/keys")).status_code == 200
    assert (await admin.get("/console/fleet")).status_code == 200
    assert (await admin.get("/console/batches")).status_code == 403  # batches belong to teams


async def test_keys_are_made_once_listed_and_revoked(
    signed_in: Callable[..., httpx.AsyncClient], admin_key: str, anonymous: httpx.AsyncClient
) -> None:
    admin = await signed_in(admin_key)
    page = await admin.get("/console/keys")
    token = csrf_of(page.text)
    assert (await admin.post("/console/keys", data={"team": "beta"})).status_code == 403  # no token
    made = await admin.post("/console/keys", data={"team": "beta", "csrf": token})
    assert made.status_code == 200 and made.headers["cache-control"] == "no-store"
    key_match = re.search(r'<code id="new-key">([^<]+)</code>', made.text)
    assert key_match
    key = key_match.group(1)
    headers = {"Authorization": f"Bearer {key}"}
    assert (await anonymous.get("/v1/models", headers=headers)).status_code == 200
    listed = await admin.get("/console/keys")
    assert key not in listed.text and 'data-team="beta"' in listed.text
    key_hash = re.search(r'data-team="beta" data-hash="([0-9a-f]{64})"', listed.text)
    assert key_hash
    assert (await admin.post("/console/keys", data={"team": "nobody", "csrf": token})).status_code == 400
    revoked = await admin.post("/console/keys/revoke", data={"key_hash": key_hash.group(1), "csrf": token})
    assert revoked.status_code == 303
    assert (await anonymous.get("/v1/models", headers=headers)).status_code == 401


async def test_the_fleet_page_shows_servers_load_and_targets_and_drains_on_confirmation(
    app: FastAPI, signed_in: Callable[..., httpx.AsyncClient], admin_key: str
) -> None:
    now = time.time()
    registry: ServerRegistry = app.state.services.servers
    console: ConsoleState = app.state.console
    for server_id in ("small-0", "small-1"):
        await registry.register(
            ServerInfo(server_id, "small", "127.0.0.1", 1, 2, 3, (), ServerState.READY, now - 60, now - 1.5)
        )
    await console.load_board.publish(
        "small", LoadReport("small-0", 7, now, True, EngineHealth(now, 8192, 2048, 3, 5, 0, 3))
    )
    await console.targets.write(PoolTarget("small", 3, 2, 0, 0, ("TTFT p90 over target: +1",), now - 4, "supervisor"))
    admin = await signed_in(admin_key)
    page = await admin.get("/console/fleet")
    assert page.status_code == 200
    row = re.search(r'<tr data-server="small-0" data-state="ready">(.*?)</tr>', page.text, re.S)
    assert row and "6,144 / 8,192" in row.group(1) and "<td>3</td>" in row.group(1) and "<td>5</td>" in row.group(1)
    assert "target 3" in page.text and "TTFT p90 over target: +1" in page.text and "Pool large" in page.text
    confirm = await admin.get("/console/fleet/servers/small-1/drain")
    assert confirm.status_code == 200 and "cannot be undone" in confirm.text
    assert (await admin.post("/console/fleet/servers/small-1/drain")).status_code == 403  # no token
    assert (await registry.get("small-1")).state is ServerState.READY  # type: ignore[union-attr]
    drained = await admin.post("/console/fleet/servers/small-1/drain", data={"csrf": csrf_of(confirm.text)})
    assert drained.status_code == 303
    assert (await registry.get("small-1")).state is ServerState.DRAINING  # type: ignore[union-attr]
    missing = await admin.post("/console/fleet/servers/nope/drain", data={"csrf": csrf_of(confirm.text)})
    assert missing.status_code == 404


async def test_upload_list_cancel_and_another_team_sees_none_of_it(
    signed_in: Callable[..., httpx.AsyncClient],
    team_key: str,
    make_key: Callable[[str], str],
    client: httpx.AsyncClient,
) -> None:
    alpha = await signed_in(team_key)
    page = await alpha.get("/console/batches")
    token = csrf_of(page.text)
    body = jsonl({"prompt": "the quick brown fox", "max_tokens": 2, "custom_id": "a"})
    form = {"data": {"model": "small", "deadline": "2h"}, "files": {"file": ("in.jsonl", body, "application/jsonl")}}
    forged = await alpha.post("/console/batches", **form)  # type: ignore[arg-type]
    assert forged.status_code == 403
    assert "No batches yet" in (await alpha.get("/console/batches/rows")).text  # nothing made
    refused = await alpha.post(
        "/console/batches",
        data={"model": "small", "deadline": "99h"},
        files={"file": ("in.jsonl", body, "application/jsonl")},
        headers={"X-CSRF-Token": token},
    )
    assert refused.status_code == 400 and "24h" in refused.json()["error"]["message"]  # the API's own check
    made = await alpha.post("/console/batches", **form, headers={"X-CSRF-Token": token})  # type: ignore[arg-type]
    assert made.status_code == 202, made.text
    batch_id = made.json()["id"]
    rows = await alpha.get("/console/batches/rows")
    assert f'id="row-{batch_id}" data-status="in_progress"' in rows.text
    detail = await alpha.get(f"/console/batches/{batch_id}")
    assert detail.status_code == 200 and 'id="cancel"' in detail.text
    uploaded = await client.post(
        "/v1/files", data={"purpose": "batch"}, files={"file": ("mine.jsonl", body, "application/jsonl")}
    )
    assert uploaded.status_code == 200, uploaded.text
    listing = await alpha.get("/console/batches")
    file_ids = re.findall(r'data-file="(file-[^"]+)"', listing.text)
    assert file_ids == [uploaded.json()["id"]] and "mine.jsonl" in listing.text
    assert (await alpha.get(f"/console/files/{file_ids[0]}/content")).content == body

    beta = await signed_in(make_key("beta"))
    assert "No batches yet" in (await beta.get("/console/batches")).text
    assert "No files." in (await beta.get("/console/batches")).text
    for path in (
        f"/console/batches/{batch_id}",
        f"/console/batches/{batch_id}/results",
        f"/console/files/{file_ids[0]}/content",
    ):
        assert (await beta.get(path)).status_code == 404, path
    beta_token = csrf_of((await beta.get("/console/batches")).text)
    stolen = await beta.post(f"/console/batches/{batch_id}/cancel", data={"csrf": beta_token})
    assert stolen.status_code == 404

    cancelled = await alpha.post(f"/console/batches/{batch_id}/cancel", data={"csrf": token})
    assert cancelled.status_code == 303 and cancelled.headers["location"] == f"/console/batches/{batch_id}"
    summary = await alpha.get(f"/console/batches/{batch_id}/summary")
    assert 'data-status="cancelling"' in summary.text or 'data-status="cancelled"' in summary.text


async def test_every_page_fits_in_300_kb_with_a_busy_week(
    app: FastAPI, signed_in: Callable[..., httpx.AsyncClient], team_key: str, admin_key: str
) -> None:
    now = datetime.now(UTC)
    for hour in range(7 * 24):  # six series used every hour of the week: the largest usage page
        for model in ("small", "large", "medium-with-a-longer-name"):
            for cls in ("interactive", "bulk"):
                at = now - timedelta(hours=hour)
                await record(app, "alpha", model, cls, at, prompt_tokens=1000 + hour, completion_tokens=hour)
    team = await signed_in(team_key)
    admin = await signed_in(admin_key)
    sizes = {}
    for http, path in (
        (team, "/console/usage?window=7d"), (team, "/console/usage?window=24h"), (team, "/console/batches"),
        (admin, "/console/usage?window=7d"), (admin, "/console/keys"), (admin, "/console/fleet"),
    ):  # fmt: skip
        reply = await http.get(path)
        assert reply.status_code == 200, path
        sizes[path] = len(reply.content)
        assert len(reply.content) < MAX_PAGE_BYTES, (path, len(reply.content))
    assert sizes["/console/usage?window=7d"] > 20_000  # the week really was drawn
    for name in ("console.css", "console.js"):
        static = await team.get(f"/console/static/{name}")
        assert static.status_code == 200 and len(static.content) < 20_000


async def test_pages_carry_a_strict_content_security_policy(
    signed_in: Callable[..., httpx.AsyncClient], team_key: str
) -> None:
    team = await signed_in(team_key)
    page = await team.get("/console/usage")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "<script>" not in page.text and "http://" not in page.text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert '<meta name="viewport"' in page.text
    assert (await team.get("/console/static/../app.py")).status_code in (403, 404)


def test_the_console_upload_gets_the_upload_limit_at_the_edge(app: FastAPI) -> None:
    """Not the 4 MiB JSON limit: a batch file as large as `POST /v1/batches` takes."""
    limits = app.state.edge.limits
    multipart = "multipart/form-data; boundary=x"
    assert limits.for_request("/console/batches", multipart) == limits.max_upload_bytes > limits.max_body_bytes
    assert limits.for_request("/console/signin", "application/x-www-form-urlencoded") == limits.max_body_bytes
