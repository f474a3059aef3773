"""Batches on the real stack: gateway processes, the dispatcher process, Redis, tritonserver.

Uploads go through HTTP (native multipart and the official `openai` SDK); the dispatcher runs
entries through the gateway as class `bulk`; results are compared with direct requests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from config.settings import SwitchyardConfig, dump_config
from quota.key_files import ADMIN_KEY_ENV
from server_host.ports import free_ports
from server_host.process import ManagedProcess, wait_until

from .conftest import LiveGateway

pytestmark = pytest.mark.integration

PROMPTS = [f"batch prompt number {i} about the fleet" for i in range(12)]


def jsonl(lines: list[Any]) -> bytes:
    return b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)


def native_lines(prompts: list[str], max_tokens: int, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"custom_id": f"c{i}", "prompt": p, "max_tokens": max_tokens, "temperature": 0.0, **extra}
        for i, p in enumerate(prompts)
    ]


@pytest.fixture
def dispatcher_config(live_gateway: LiveGateway) -> SwitchyardConfig:
    """The gateway's config, with a quick reclaim and flush and a free metrics port."""
    bulk = live_gateway.config.bulk.model_copy(
        update={"reclaim_idle_s": 2.0, "results_flush_s": 0.2, "metrics_port": free_ports(1)[0]}
    )
    return live_gateway.config.model_copy(update={"bulk": bulk})


@pytest.fixture
def start_dispatcher(
    live_gateway: LiveGateway, dispatcher_config: SwitchyardConfig
) -> Iterator[Callable[[], ManagedProcess]]:
    """Start a dispatcher process (each call another one); all are stopped at the end."""
    config = dispatcher_config
    path = dump_config(config, config.var_path / "run" / "dispatcher-e2e.yaml")
    env = {
        **os.environ,
        "SWITCHYARD_CONFIG": str(path),
        "SWITCHYARD_GATEWAY_URL": live_gateway.url,
        ADMIN_KEY_ENV: live_gateway.admin_key,
    }
    started: list[ManagedProcess] = []

    def start() -> ManagedProcess:
        """One dispatcher at a time serves metrics on `bulk.metrics_port` (the first one)."""
        log = config.var_path / "logs" / f"dispatcher-{len(started)}.log"
        process = ManagedProcess("dispatcher", [sys.executable, "-m", "bulk"], log, env=env)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def http(live_gateway: LiveGateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_gateway.url, headers=live_gateway.headers, timeout=60) as client:
        yield client


def submit(http: httpx.Client, body: bytes, deadline: str = "1h") -> dict[str, Any]:
    reply = http.post(
        "/v1/batches",
        data={"model": "tiny", "deadline": deadline},
        files={"file": ("in.jsonl", body, "application/jsonl")},
    )
    assert reply.status_code == 202, reply.text
    batch: dict[str, Any] = reply.json()
    return batch


def wait_for(
    http: httpx.Client, batch_id: str, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 120
) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def check() -> bool:
        nonlocal last
        last = http.get(f"/v1/batches/{batch_id}").json()
        return predicate(last)

    assert wait_until(check, timeout_s, interval_s=0.2), f"batch never got there: {last}"
    return last


def ended(batch: dict[str, Any]) -> bool:
    return batch["status"] in ("completed", "expired", "cancelled", "failed")


def read_jsonl(http: httpx.Client, path: str) -> list[dict[str, Any]]:
    reply = http.get(path)
    assert reply.status_code == 200, reply.text
    return [json.loads(line) for line in reply.text.splitlines()]


def direct_text(http: httpx.Client, prompt: str, max_tokens: int) -> str:
    reply = http.post(
        "/v1/generate", json={"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    )
    assert reply.status_code == 200, reply.text
    text: str = reply.json()["text"]
    return text


def test_batch_results_match_direct_requests(
    http: httpx.Client, start_dispatcher: Callable[[], ManagedProcess], dispatcher_config: SwitchyardConfig
) -> None:
    start_dispatcher()
    batch = submit(http, jsonl([*native_lines(PROMPTS, 8), b"{broken", {"prompt": "no max tokens"}]))
    assert batch["counts"] == {"total": 14, "done": 0, "failed": 2, "expired": 0, "pending": 12}
    final = wait_for(http, batch["id"], ended)
    assert final["status"] == "completed"
    assert final["counts"] == {"total": 14, "done": 12, "failed": 2, "expired": 0, "pending": 0}
    results = {r["custom_id"]: r for r in read_jsonl(http, final["links"]["results"])}
    assert len(results) == 12
    for i, prompt in enumerate(PROMPTS):
        assert results[f"c{i}"]["response"]["body"]["text"] == direct_text(http, prompt, 8)
    errors = read_jsonl(http, final["links"]["errors"])
    assert [(e["line"], e["error"]["code"]) for e in errors] == [(13, "invalid_json"), (14, "invalid_request")]
    bulk_usage = [row for row in http.get("/v1/usage").json()["data"] if row["class"] == "bulk"]
    assert bulk_usage and bulk_usage[0]["requests"] >= 12 and bulk_usage[0]["team"] == "e2e"  # metered as bulk
    metrics = httpx.get(f"http://127.0.0.1:{dispatcher_config.bulk.metrics_port}/metrics").text
    assert 'switchyard_bulk_entries_total{outcome="done",team="e2e"} 12.0' in metrics


def test_openai_sdk_batch_end_to_end(
    live_gateway: LiveGateway, start_dispatcher: Callable[[], ManagedProcess], http: httpx.Client
) -> None:
    start_dispatcher()
    lines = [
        {"custom_id": f"q{i}", "method": "POST", "url": "/v1/completions",
         "body": {"model": "tiny", "prompt": p, "max_tokens": 6, "temperature": 0.0}}
        for i, p in enumerate(PROMPTS[:4])
    ]  # fmt: skip
    sdk = openai.OpenAI(base_url=f"{live_gateway.url}/v1", api_key=live_gateway.api_key, max_retries=0)
    uploaded = sdk.files.create(file=("batch.jsonl", jsonl(lines)), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(jsonl(lines))
    batch = sdk.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h")
    assert batch.status == "in_progress" and batch.request_counts is not None and batch.request_counts.total == 4
    assert wait_until(lambda: sdk.batches.retrieve(batch.id).status == "completed", 120, interval_s=0.3)
    done = sdk.batches.retrieve(batch.id)
    assert done.request_counts is not None and done.request_counts.completed == 4
    assert done.output_file_id is not None and done.error_file_id is None
    outputs = [json.loads(line) for line in sdk.files.content(done.output_file_id).text.splitlines()]
    by_id = {o["custom_id"]: o["response"]["body"]["choices"][0]["text"] for o in outputs}
    for i, prompt in enumerate(PROMPTS[:4]):
        direct = sdk.completions.create(model="tiny", prompt=prompt, max_tokens=6, temperature=0.0)
        assert by_id[f"q{i}"] == direct.choices[0].text
    assert batch.id in [b.id for b in sdk.batches.list()]


def test_a_killed_dispatcher_loses_and_duplicates_nothing(
    http: httpx.Client, start_dispatcher: Callable[[], ManagedProcess]
) -> None:
    prompts = [f"reclaim test {i}" for i in range(40)]
    first = start_dispatcher()
    # 200 tokens an entry: at 24 a fast machine finished all 40 between the poll that saw 3
    # done and the kill.
    batch = submit(http, jsonl(native_lines(prompts, 200, ignore_eos=True)))
    wait_for(http, batch["id"], lambda b: b["counts"]["done"] >= 3, timeout_s=60)
    assert first.pid is not None
    os.killpg(first.pid, signal.SIGKILL)  # mid-batch: chunks held, entries in flight
    mid = http.get(f"/v1/batches/{batch['id']}").json()
    assert mid["counts"]["done"] < 40, "the batch finished before the kill: make it longer"
    start_dispatcher()
    final = wait_for(http, batch["id"], ended, timeout_s=180)
    assert final["status"] == "completed", final
    assert final["counts"]["done"] == 40
    results = read_jsonl(http, final["links"]["results"])
    assert sorted(r["line"] for r in results) == list(range(1, 41))  # each once
    assert all(r["response"]["body"]["stop_reason"] == "length" for r in results)


def test_interactive_requests_are_served_while_a_backlog_waits(
    http: httpx.Client, start_dispatcher: Callable[[], ManagedProcess]
) -> None:
    start_dispatcher()
    batch = submit(http, jsonl(native_lines([f"backlog {i}" for i in range(300)], 48, ignore_eos=True)))
    wait_for(http, batch["id"], lambda b: b["started_at"] is not None, timeout_s=30)
    for i in range(5):
        began = time.monotonic()
        reply = http.post("/v1/generate", json={"model": "tiny", "prompt": f"person {i}", "max_tokens": 4})
        assert reply.status_code == 200, reply.text
        assert time.monotonic() - began < 30
    assert http.get(f"/v1/batches/{batch['id']}").json()["counts"]["pending"] > 0
    cancelled = http.post(f"/v1/batches/{batch['id']}/cancel").json()
    assert cancelled["status"] in ("cancelling", "cancelled", "finalizing")
    final = wait_for(http, batch["id"], ended, timeout_s=60)
    assert final["status"] == "cancelled"
    counts = final["counts"]
    assert counts["pending"] == 0 and counts["done"] + counts["failed"] == 300
    codes = {e["error"]["code"] for e in read_jsonl(http, final["links"]["errors"])}
    assert codes == {"batch_cancelled"}


def test_a_batch_expires_at_its_deadline(http: httpx.Client, start_dispatcher: Callable[[], ManagedProcess]) -> None:
    start_dispatcher()
    lines = native_lines([f"expiring {i}" for i in range(500)], 200, ignore_eos=True)
    batch = submit(http, jsonl(lines), deadline="4s")
    final = wait_for(http, batch["id"], ended, timeout_s=60)
    assert final["status"] == "expired"
    counts = final["counts"]
    assert counts["expired"] > 0 and counts["done"] + counts["expired"] == 500 and counts["pending"] == 0
    assert len(read_jsonl(http, final["links"]["results"])) == counts["done"]  # finished ones stay downloadable
    assert {e["error"]["code"] for e in read_jsonl(http, final["links"]["errors"])} == {"batch_expired"}


def test_refused_files_and_other_teams(http: httpx.Client, live_gateway: LiveGateway) -> None:
    not_jsonl = http.post("/v1/batches", data={"model": "tiny"}, files={"file": ("x.csv", b"a,b\n1,2\n")})
    assert not_jsonl.status_code == 400 and "JSONL" in not_jsonl.json()["error"]["message"]
    no_valid = http.post("/v1/batches", data={"model": "tiny"}, files={"file": ("x.jsonl", b'{"prompt": "x"}\n')})
    assert no_valid.status_code == 400 and "max_tokens" in no_valid.json()["error"]["message"]
    batch = submit(http, jsonl(native_lines(["mine"], 2)))
    other = {"Authorization": f"Bearer {live_gateway.other_key}"}
    for method, path in (("GET", ""), ("GET", "/results"), ("GET", "/errors"), ("POST", "/cancel")):
        reply = http.request(method, f"/v1/batches/{batch['id']}{path}", headers=other)
        assert reply.status_code == 404, (path, reply.text)
    assert batch["id"] not in [b["id"] for b in http.get("/v1/batches", headers=other).json()["data"]]
    assert http.get(f"/v1/batches/{batch['id']}").json()["status"] != "cancelling"


def test_switchyard_batches_submits_and_follows_progress(
    live_gateway: LiveGateway, start_dispatcher: Callable[[], ManagedProcess], tmp_path: Path
) -> None:
    start_dispatcher()
    path = tmp_path / "in.jsonl"
    path.write_bytes(jsonl(native_lines([f"cli {i}" for i in range(6)], 4)))
    config = dump_config(live_gateway.config, tmp_path / "switchyard.yaml")
    cli = [sys.executable, "-m", "switchyard.cli", "--config", str(config), "batches"]
    auth = ["--url", live_gateway.url, "--key", live_gateway.api_key]
    submitted = subprocess.run(
        [*cli, "submit", str(path), "--model", "tiny", "--deadline", "1h", "--interval", "0.2", *auth],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    lines = submitted.stdout.splitlines()
    assert lines[0].startswith("batch batch_") and "6 requests, 0 refused lines" in lines[0]
    batch_id = lines[0].split()[1].rstrip(":")
    assert "completed" in lines[-2] and "100%" in lines[-2] and "done 6" in lines[-2]
    assert lines[-1] == f"results: /v1/batches/{batch_id}/results   errors: /v1/batches/{batch_id}/errors"
    listed = subprocess.run([*cli, *auth], capture_output=True, text=True, timeout=60, check=True).stdout
    assert any(line.startswith(batch_id) and "completed" in line for line in listed.splitlines())
    results = subprocess.run(
        [*cli, "results", batch_id, *auth], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert sorted(json.loads(line)["custom_id"] for line in results.splitlines()) == [f"c{i}" for i in range(6)]
