"""The Files API's caps and retention through the gateway app (real Redis, real blob store, a
dispatcher in the same event loop): DELETE, `expires_after`, the per-team storage quota, a
refused upload leaving nothing behind, and expiry removing every byte and record."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from bulk.blob_store import LocalBlobStore
from bulk.dispatcher import Dispatcher
from bulk.gateway_client import GatewaySubmitter
from bulk.pool_loads import LivePoolLoads
from bulk.retention import SweepReport
from quota.capacity import StaticCapacity

DAY = 86400
TEAM_STORAGE = 1_000_000
BETA_STORAGE = 600
BOUNDARY = "sy-files-boundary"
LINE = {"custom_id": "a", "method": "POST", "url": "/v1/completions",
        "body": {"model": "small", "prompt": "the fox", "max_tokens": 2}}  # fmt: skip
JSONL = json.dumps(LINE).encode() + b"\n"


@pytest.fixture
def config_path(config_path: Path) -> Path:
    """The gateway tests' config with a storage quota (team beta: 600 bytes) and quick batches."""
    text = config_path.read_text().replace("beta: {weight: 1,", f"beta: {{weight: 1, storage_bytes: {BETA_STORAGE},")
    assert f"storage_bytes: {BETA_STORAGE}" in text
    config_path.write_text(
        text + f"bulk: {{results_flush_s: 0.05, reclaim_idle_s: 0.3, team_storage_bytes: {TEAM_STORAGE}}}\n"
    )
    return config_path


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def blob_root(app: FastAPI) -> Path:
    root = app.state.services.config.blob_path
    assert isinstance(root, Path)
    return root


@pytest.fixture
async def beta(app: FastAPI, make_key: Callable[[str], str]) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {make_key('beta')}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers) as http:
        yield http


@pytest.fixture
async def dispatcher(
    app: FastAPI, admin_key: str, redis_client: aioredis.Redis, capacity: StaticCapacity
) -> AsyncIterator[Dispatcher]:
    services = app.state.services
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as http:
        yield Dispatcher(
            services.config, redis_client, LocalBlobStore(services.config.blob_path), services.catalog,
            GatewaySubmitter(http, admin_key), LivePoolLoads(capacity, services.admission.store),
            consumer="files-test", refresh_s=0.0,
        )  # fmt: skip


async def run_until(dispatcher: Dispatcher, done: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await done():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await dispatcher.step()
        await asyncio.sleep(0.01)


def form(*parts: tuple[str, str | bytes], cut: bool = False) -> tuple[bytes, dict[str, str]]:
    """A multipart body with the parts in this order (`file` as a file part); `cut`: no end."""
    body = b""
    for name, value in parts:
        filename = '; filename="in.jsonl"' if name == "file" else ""
        data = value if isinstance(value, bytes) else value.encode()
        body += f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"{filename}\r\n\r\n'.encode()
        body += data + b"\r\n"
    if not cut:
        body += f"--{BOUNDARY}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


async def upload(client: httpx.AsyncClient, *parts: tuple[str, str | bytes], cut: bool = False) -> httpx.Response:
    body, headers = form(*parts, cut=cut)
    return await client.post("/v1/files", content=body, headers=headers)


def blob_files(root: Path) -> list[str]:
    """Every file in the blob store, hidden temp files of uploads in progress included."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


async def stored_keys(client: aioredis.Redis) -> list[str]:
    """Redis keys a stored file or batch leaves, and any storage counted."""
    keys = [key for pattern in ("sy:file*", "sy:expiry*", "sy:batch:*") for key in await client.keys(pattern)]
    counted = [key for key in await client.keys("sy:storage:*") if int(await client.get(key) or 0)]
    return sorted(key.decode() if isinstance(key, bytes) else key for key in keys + counted)


async def test_upload_then_delete(
    client: httpx.AsyncClient, beta: httpx.AsyncClient, blob_root: Path, redis_client: aioredis.Redis
) -> None:
    uploaded = await upload(client, ("purpose", "batch"), ("file", JSONL))
    assert uploaded.status_code == 200, uploaded.text
    file_id = uploaded.json()["id"]
    listed = (await client.get("/v1/files")).json()
    assert listed["storage"] == {"used_bytes": len(JSONL), "limit_bytes": TEAM_STORAGE}
    assert (await beta.delete(f"/v1/files/{file_id}")).status_code == 404  # another team's: absent
    deleted = await client.delete(f"/v1/files/{file_id}")
    assert deleted.status_code == 200 and deleted.json() == {"id": file_id, "object": "file", "deleted": True}
    assert (await client.get(f"/v1/files/{file_id}")).status_code == 404
    assert (await client.get(f"/v1/files/{file_id}/content")).status_code == 404
    assert (await client.delete(f"/v1/files/{file_id}")).json()["error"]["type"] == "not_found_error"
    for unknown in ("file-unknown", "sy:batches:active", "x" * 300):
        assert (await client.delete(f"/v1/files/{unknown}")).status_code == 404
    listed = (await client.get("/v1/files")).json()
    assert listed["data"] == [] and listed["storage"]["used_bytes"] == 0
    assert blob_files(blob_root) == [] and await stored_keys(redis_client) == []


async def test_files_expire_in_30_days_or_as_expires_after_says(client: httpx.AsyncClient) -> None:
    default = (await upload(client, ("purpose", "batch"), ("file", JSONL))).json()
    assert default["expires_at"] == default["created_at"] + 30 * DAY
    hour = await upload(
        client, ("purpose", "batch"), ("expires_after[anchor]", "created_at"), ("expires_after[seconds]", "3600"),
        ("file", JSONL),
    )  # fmt: skip
    assert hour.status_code == 200, hour.text
    assert hour.json()["expires_at"] - hour.json()["created_at"] in (3600, 3601)  # created_at is rounded down


BAD_EXPIRY = ("expires_after[anchor]", "created_at")
REFUSALS: dict[str, tuple[list[tuple[str, str | bytes]], int, str]] = {
    "purpose before the file": ([("purpose", "fine-tune"), ("file", JSONL)], 400, "purpose must be 'batch'"),
    "purpose after the file": ([("file", JSONL), ("purpose", "assistants")], 400, "purpose must be 'batch'"),
    "no purpose": ([("file", JSONL)], 400, "send purpose=batch"),
    "anchor": (
        [("purpose", "batch"), ("expires_after[anchor]", "now"), ("expires_after[seconds]", "3600"), ("file", JSONL)],
        400,
        "must be 'created_at'",
    ),
    "seconds too few, after the file": (
        [("purpose", "batch"), ("file", JSONL), BAD_EXPIRY, ("expires_after[seconds]", "60")],
        400,
        "from 3600",
    ),
    "seconds too many": (
        [("purpose", "batch"), BAD_EXPIRY, ("expires_after[seconds]", "2592001"), ("file", JSONL)],
        400,
        "to 2592000",
    ),
    "seconds not a number": (
        [("purpose", "batch"), BAD_EXPIRY, ("expires_after[seconds]", "1e9"), ("file", JSONL)],
        400,
        "an integer",
    ),
    "seconds alone": ([("purpose", "batch"), ("expires_after[seconds]", "3600"), ("file", JSONL)], 400, "anchor"),
    "not JSONL": ([("purpose", "batch"), ("file", b"custom_id,prompt\na,the fox\n")], 400, "not JSONL"),
    "empty": ([("purpose", "batch"), ("file", b"\n\n")], 400, "no requests"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
async def test_a_refused_upload_leaves_nothing_behind(
    case: str, client: httpx.AsyncClient, blob_root: Path, redis_client: aioredis.Redis
) -> None:
    parts, status, words = REFUSALS[case]
    reply = await upload(client, *parts)
    assert reply.status_code == status, reply.text
    assert words in reply.json()["error"]["message"]
    assert (await client.get("/v1/files")).json()["data"] == []
    assert blob_files(blob_root) == [] and await stored_keys(redis_client) == []


async def test_a_cut_upload_leaves_nothing_behind(
    client: httpx.AsyncClient, blob_root: Path, redis_client: aioredis.Redis
) -> None:
    reply = await upload(client, ("purpose", "batch"), ("file", JSONL * 10), cut=True)
    assert reply.status_code == 400, reply.text
    assert blob_files(blob_root) == [] and await stored_keys(redis_client) == []


async def test_over_the_storage_quota_is_a_413_that_says_used_and_limit(
    beta: httpx.AsyncClient, blob_root: Path, redis_client: aioredis.Redis
) -> None:
    first = await upload(beta, ("purpose", "batch"), ("file", JSONL))
    assert first.status_code == 200, first.text
    used = first.json()["bytes"]
    blobs_before, keys_before = blob_files(blob_root), await stored_keys(redis_client)
    # Without Content-Length (streamed), and with it (refused before the body is read).
    for chunked in (True, False):
        body, headers = form(("purpose", "batch"), ("file", JSONL * 4))  # 129 + 516 bytes > 600

        async def stream(data: bytes = body) -> AsyncIterator[bytes]:
            yield data

        reply = await beta.post("/v1/files", content=stream() if chunked else body, headers=headers)
        assert reply.status_code == 413, reply.text
        error = reply.json()["error"]
        assert error["param"] == "file" and "storage_quota_exceeded" in (error.get("code"), error["type"])
        assert f"stores {used} bytes of its {BETA_STORAGE} bytes limit" in error["message"]
        assert blob_files(blob_root) == blobs_before and await stored_keys(redis_client) == keys_before
    listed = (await beta.get("/v1/files")).json()
    assert listed["storage"] == {"used_bytes": used, "limit_bytes": BETA_STORAGE}


async def test_native_batches_count_in_storage_and_refusals_keep_nothing(
    beta: httpx.AsyncClient, client: httpx.AsyncClient, blob_root: Path, redis_client: aioredis.Redis
) -> None:
    native = json.dumps({"prompt": "the fox", "max_tokens": 2}).encode() + b"\n"
    over = await beta.post(
        "/v1/batches", data={"model": "small"}, files={"file": ("in.jsonl", native * 20, "application/jsonl")}
    )
    assert over.status_code == 413 and "storage quota" in over.json()["error"]["message"], over.text
    # Fields after the file: the file is kept first, then the batch refused; it goes too.
    body, headers = form(("file", native), ("model", "no-such-model"))
    assert (await client.post("/v1/batches", content=body, headers=headers)).status_code == 404
    body, headers = form(("file", native))
    assert (await client.post("/v1/batches", content=body, headers=headers)).status_code == 400
    assert blob_files(blob_root) == [] and await stored_keys(redis_client) == []
    made = await client.post("/v1/batches", data={"model": "small"}, files={"file": ("in.jsonl", native)})
    assert made.status_code == 202, made.text
    assert (await client.get("/v1/files")).json()["storage"]["used_bytes"] == len(native)


async def test_deleting_a_file_a_batch_reads_lets_the_batch_finish(
    client: httpx.AsyncClient, dispatcher: Dispatcher, blob_root: Path, redis_client: aioredis.Redis
) -> None:
    file_id = (await upload(client, ("purpose", "batch"), ("file", JSONL * 3))).json()["id"]
    made = await client.post("/v1/batches", json={"input_file_id": file_id, "endpoint": "/v1/completions"})
    assert made.status_code == 202, made.text
    batch_id = made.json()["id"]
    assert (await client.delete(f"/v1/files/{file_id}")).json()["deleted"] is True
    assert (await client.get(f"/v1/files/{file_id}")).status_code == 404
    assert f"files/{file_id}" in blob_files(blob_root)  # the batch has not read its lines yet

    async def ended() -> bool:
        return bool((await client.get(f"/v1/batches/{batch_id}")).json()["status"] == "completed")

    await run_until(dispatcher, ended)
    assert (await client.get(f"/v1/batches/{batch_id}")).json()["request_counts"]["completed"] == 3
    await dispatcher.retention.sweep(now=time.time() + 1)
    assert f"files/{file_id}" not in blob_files(blob_root)  # gone once the batch ended


async def test_a_finished_batch_and_its_files_expire_completely(
    client: httpx.AsyncClient, dispatcher: Dispatcher, blob_root: Path, redis_client: aioredis.Redis
) -> None:
    file_id = (await upload(client, ("purpose", "batch"), ("file", JSONL))).json()["id"]
    made = await client.post("/v1/batches", json={"input_file_id": file_id, "endpoint": "/v1/completions"})
    batch_id = made.json()["id"]

    async def ended() -> bool:
        return bool((await client.get(f"/v1/batches/{batch_id}")).json()["status"] == "completed")

    await run_until(dispatcher, ended)
    batch = (await client.get(f"/v1/batches/{batch_id}")).json()
    output = (await client.get(f"/v1/files/{batch['output_file_id']}")).json()
    assert output["expires_at"] == pytest.approx(batch["completed_at"] + 30 * DAY, abs=1)
    assert await dispatcher.retention.sweep(now=time.time() + 29 * DAY) == SweepReport()  # nothing due yet
    await dispatcher.retention.sweep(now=time.time() + 31 * DAY)
    for path in (f"/v1/batches/{batch_id}", f"/v1/files/{file_id}", f"/v1/files/{batch['output_file_id']}"):
        assert (await client.get(path)).status_code == 404, path
    assert (await client.get("/v1/batches")).json()["data"] == []
    assert blob_files(blob_root) == [] and await stored_keys(redis_client) == []


async def test_output_expires_after_sets_the_output_files_lifetime(
    client: httpx.AsyncClient, dispatcher: Dispatcher
) -> None:
    file_id = (await upload(client, ("purpose", "batch"), ("file", JSONL))).json()["id"]
    body: dict[str, Any] = {"input_file_id": file_id, "endpoint": "/v1/completions"}
    refused = await client.post(
        "/v1/batches", json={**body, "output_expires_after": {"anchor": "created_at", "seconds": 5}}
    )
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "output_expires_after.seconds"
    made = await client.post(
        "/v1/batches", json={**body, "output_expires_after": {"anchor": "created_at", "seconds": 7200}}
    )
    batch_id = made.json()["id"]

    async def ended() -> bool:
        return bool((await client.get(f"/v1/batches/{batch_id}")).json()["status"] == "completed")

    await run_until(dispatcher, ended)
    batch = (await client.get(f"/v1/batches/{batch_id}")).json()
    output = (await client.get(f"/v1/files/{batch['output_file_id']}")).json()
    assert output["expires_at"] == pytest.approx(batch["completed_at"] + 7200, abs=1)


async def test_the_openai_sdk_uploads_with_expires_after_and_deletes(app: FastAPI, team_key: str) -> None:
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport) as http,
        # cast: the SDK's stubs name their own httpx; the client is the same at run time.
        openai.AsyncOpenAI(
            base_url="http://gateway/v1", api_key=team_key, http_client=cast(Any, http), max_retries=0
        ) as sdk,
    ):
        uploaded = await sdk.files.create(
            file=("in.jsonl", JSONL), purpose="batch", expires_after={"anchor": "created_at", "seconds": 7200}
        )
        assert uploaded.expires_at is not None and uploaded.expires_at - uploaded.created_at in (7200, 7201)
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.files.create(
                file=("in.jsonl", JSONL), purpose="batch", expires_after={"anchor": "created_at", "seconds": 60}
            )
        assert refused.value.param == "expires_after"
        assert [listed.id async for listed in sdk.files.list()] == [uploaded.id]
        deleted = await sdk.files.delete(uploaded.id)
        assert (deleted.id, deleted.deleted) == (uploaded.id, True)
        with pytest.raises(openai.NotFoundError):
            await sdk.files.delete(uploaded.id)
