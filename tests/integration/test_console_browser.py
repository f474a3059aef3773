"""The console in a real headless browser (Debian's chromium, driven by Playwright) on the
live stack: a real gateway (two workers), tritonserver, Redis and a dispatcher process.

Sign in; upload a batch and watch it reach 100%; cancel another; the usage chart shows what
/v1/usage returns; a team sees no other team's batches, files or usage; a team key cannot open
the operator pages; sign out; keyboard and phone width. Screenshots go to var/console-screenshots/.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from config.redis_client import redis_client
from config.settings import dump_config
from fleet_state.pool_targets import PoolTarget, PoolTargetStore
from quota.key_files import ADMIN_KEY_ENV
from server_host.ports import free_ports
from server_host.process import ManagedProcess

from .conftest import LiveGateway

pytestmark = pytest.mark.integration
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency: pip install -e '.[dev]'")

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "console-screenshots"
LAPTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
WAIT_MS = 120_000  # generous: two shared cores run tritonserver, the gateway and the browser


def chromium_path() -> str | None:
    """Debian's chromium (never a browser Playwright would download)."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium_path()
    if path is None:
        pytest.skip("Debian's chromium is not installed (`apt-get install chromium`; `make test` installs it)")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()


@pytest.fixture
def new_page(browser: Any, live_gateway: LiveGateway) -> Iterator[Callable[..., Any]]:
    """`new_page(viewport=LAPTOP)`: a page in a fresh context (its own cookies)."""
    contexts: list[Any] = []

    def make(viewport: dict[str, int] = LAPTOP) -> Any:
        context = browser.new_context(viewport=viewport, base_url=live_gateway.url)
        context.set_default_timeout(WAIT_MS)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def start_dispatcher(live_gateway: LiveGateway) -> Iterator[Callable[[], ManagedProcess]]:
    bulk = live_gateway.config.bulk.model_copy(
        update={"reclaim_idle_s": 2.0, "results_flush_s": 0.2, "metrics_port": free_ports(1)[0]}
    )
    config = live_gateway.config.model_copy(update={"bulk": bulk})
    path = dump_config(config, config.var_path / "run" / "dispatcher-console.yaml")
    env = {
        **os.environ,
        "SWITCHYARD_CONFIG": str(path),
        "SWITCHYARD_GATEWAY_URL": live_gateway.url,
        ADMIN_KEY_ENV: live_gateway.admin_key,
    }
    started: list[ManagedProcess] = []

    def start() -> ManagedProcess:
        process = ManagedProcess(
            "dispatcher", [sys.executable, "-m", "bulk"], config.var_path / "logs" / "disp-c.log", env=env
        )
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def sign_in(page: Any, key: str, then: str = "/console/usage") -> None:
    page.goto(f"/console/signin?next={then}")
    page.fill("#key", key)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(re.escape(then)))


def shoot(page: Any, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


async def publish_target(live_gateway: LiveGateway) -> None:
    client = redis_client(live_gateway.config, "fleet")
    try:
        reasons = ("interactive forecast 1.4 servers at peak", "headroom +1")
        await PoolTargetStore(client).write(PoolTarget("tiny", 2, 1, 0, 0, reasons, time.time(), "supervisor"))
    finally:
        await client.aclose()


def jsonl_file(tmp_path: Path, name: str, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def upload(page: Any, path: Path, deadline: str = "2h") -> str:
    """Upload through the page's form; the script takes us to the new batch. Its id."""
    page.goto("/console/batches")
    page.select_option("#model", "tiny")
    page.fill("#deadline", deadline)
    page.set_input_files("#file", str(path))
    page.click("#upload button[type=submit]")
    page.wait_for_url(re.compile(r"/console/batches/batch_"))
    return str(page.url.rsplit("/", 1)[1])


def test_sign_in_upload_a_batch_to_100_percent_and_cancel_another(
    new_page: Callable[..., Any],
    live_gateway: LiveGateway,
    start_dispatcher: Callable[[], ManagedProcess],
    tmp_path: Path,
) -> None:
    page = new_page()
    page.goto("/console/batches")
    page.wait_for_url(re.compile(r"/console/signin\?next="))  # no session: sent to sign in
    shoot(page, "01-sign-in")
    page.fill("#key", "sy-wrong-key")
    page.click("button[type=submit]")
    assert "not valid" in page.inner_text("#signin-error")
    sign_in(page, live_gateway.api_key, "/console/batches")
    cookie = next(c for c in page.context.cookies() if c["name"] == "sy_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
    assert cookie["value"] != live_gateway.api_key and cookie["expires"] > 0
    assert page.evaluate("document.cookie") == ""  # nothing a script could read

    # Cancelled before any dispatcher runs, so it cannot finish first.
    doomed = upload(
        page, jsonl_file(tmp_path, "cancel-me.jsonl", [{"prompt": f"cancel {i}", "max_tokens": 8} for i in range(6)])
    )
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#cancel")
    page.wait_for_selector("#batch-facts[data-status^=cancel]")

    start_dispatcher()
    lines = [
        {"custom_id": f"c{i}", "prompt": f"console prompt {i}", "max_tokens": 4, "temperature": 0.0} for i in range(4)
    ]
    batch_id = upload(page, jsonl_file(tmp_path, "console.jsonl", lines))
    page.wait_for_selector("#batch-facts[data-progress='100.0']", timeout=WAIT_MS)  # the live part, refreshed
    page.wait_for_selector("#batch-facts[data-status=completed]", timeout=WAIT_MS)
    assert page.inner_text("#batch-progress") == "100.0%"
    assert page.locator("#cancel").count() == 0  # an ended batch offers no cancel
    shoot(page, "03-batch-completed")
    with page.expect_download() as download:
        page.click("#download-results")
    results = [json.loads(line) for line in Path(download.value.path()).read_text().splitlines()]
    assert sorted(r["custom_id"] for r in results) == ["c0", "c1", "c2", "c3"]

    page.goto("/console/batches")
    page.wait_for_selector(f"#row-{doomed}[data-status=cancelled]", timeout=WAIT_MS)
    assert page.get_attribute(f"#row-{batch_id}", "data-progress") == "100.0"
    shoot(page, "02-batches")
    page.set_viewport_size(PHONE)
    shoot(page, "02-batches-phone")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1  # no sideways page


def test_the_usage_chart_shows_what_v1_usage_returns(new_page: Callable[..., Any], live_gateway: LiveGateway) -> None:
    with httpx.Client(base_url=live_gateway.url, headers=live_gateway.headers, timeout=60) as http:
        reply = http.post("/v1/generate", json={"model": "tiny", "prompt": "usage for the chart", "max_tokens": 5})
        assert reply.status_code == 200, reply.text
        page = new_page()
        sign_in(page, live_gateway.api_key)
        start = page.get_attribute("#usage-range", "data-start")
        end = page.get_attribute("#usage-range", "data-end")
        api = http.get("/v1/usage", params={"start": start, "end": end}).json()["data"]
    assert api, "the team has usage"
    for row in api:
        series = f"{row['model']} · {row['service_tier']}"  # the console names the tier
        for metric in ("requests", "prompt_tokens", "completion_tokens"):
            path = page.locator(f"#chart-{metric} path[data-series='{series}']")
            assert path.get_attribute("data-total") == str(row[metric]), (series, metric)
            cell = page.locator(
                f"#usage-totals tr[data-model='{row['model']}'][data-class='{row['class']}'] td[data-metric='{metric}']"
            )
            assert cell.inner_text().replace(",", "") == str(row[metric]), (series, metric)
    assert page.locator("#chart-kv_token_seconds .share").count() == 1  # the team's share
    shoot(page, "04-usage")
    page.set_viewport_size(PHONE)
    shoot(page, "04-usage-phone")
    with page.expect_download() as download:
        page.click("#usage-csv")
    assert Path(download.value.path()).read_text().startswith("hour,team,model,class,requests")


def test_a_team_sees_no_other_teams_batches_files_or_usage(
    new_page: Callable[..., Any], live_gateway: LiveGateway
) -> None:
    with httpx.Client(base_url=live_gateway.url, headers=live_gateway.headers, timeout=60) as http:
        body = b'{"prompt": "private to e2e", "max_tokens": 2}\n'
        file_id = http.post("/v1/files", data={"purpose": "batch"}, files={"file": ("e2e-only.jsonl", body)}).json()[
            "id"
        ]
        batch = http.post("/v1/batches", data={"model": "tiny"}, files={"file": ("e2e-batch.jsonl", body)}).json()
        http.post("/v1/generate", json={"model": "tiny", "prompt": "e2e usage", "max_tokens": 2})
    page = new_page()
    sign_in(page, live_gateway.other_key, "/console/batches")
    text = page.inner_text("main")
    assert batch["id"] not in text and file_id not in text and "e2e-only.jsonl" not in text
    assert "No batches yet" in text and "No files." in text
    page.goto("/console/usage?window=7d")
    assert "No usage in this window." in page.inner_text("#usage-totals")
    reply = page.goto(f"/console/batches/{batch['id']}")
    assert reply.status == 404
    reply = page.goto(f"/console/files/{file_id}/content")
    assert reply.status == 404
    reply = page.goto("/console/usage?team=e2e")
    assert reply.status == 403


def test_a_team_key_cannot_open_operator_pages_and_the_admin_key_can(
    new_page: Callable[..., Any], live_gateway: LiveGateway
) -> None:
    team = new_page()
    sign_in(team, live_gateway.api_key)
    assert [a.inner_text() for a in team.locator("header nav a").all()] == ["Usage", "Batches"]
    for path in ("/console/keys", "/console/fleet"):
        reply = team.goto(path)
        assert reply.status == 403 and "for operators" in team.inner_text("#error-message")
    shoot(team, "05-team-refused-operator-page")

    with ThreadPoolExecutor(1) as thread:  # Playwright's loop owns this thread
        thread.submit(asyncio.run, publish_target(live_gateway)).result()  # what the autoscaler writes
    admin = new_page()
    sign_in(admin, live_gateway.admin_key, "/console/fleet")
    autoscaler = admin.inner_text("#pool-tiny .autoscaler")
    assert "target 2" in autoscaler and "interactive forecast" in admin.inner_text("#pool-tiny .reasons")
    shoot(admin, "06-fleet")
    admin.goto("/console/keys")
    admin.select_option("#team", "e2e-other")
    admin.click("#create-key")
    new_key = admin.inner_text("#new-key")
    assert new_key.startswith("sy-")
    shoot(admin, "07-keys-created")
    admin.goto("/console/keys")
    assert new_key not in admin.content()  # shown once
    with httpx.Client(base_url=live_gateway.url, timeout=30) as http:
        assert http.get("/v1/models", headers={"Authorization": f"Bearer {new_key}"}).status_code == 200


def test_keyboard_reaches_the_pages_and_sign_out_ends_the_session(
    new_page: Callable[..., Any], live_gateway: LiveGateway
) -> None:
    page = new_page()
    sign_in(page, live_gateway.api_key)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    for _ in range(6):  # the brand, then the nav's links: reached with Tab, followed with Enter
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == "Batches":
            break
    assert page.evaluate("document.activeElement.textContent") == "Batches"
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/console/batches$"))
    page.click("form.signout button")
    page.wait_for_url(re.compile(r"/console/signin$"))
    assert not [c for c in page.context.cookies() if c["name"] == "sy_console"]
    page.goto("/console/batches")
    page.wait_for_url(re.compile(r"/console/signin\?next="))
