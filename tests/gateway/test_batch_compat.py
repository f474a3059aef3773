"""The batch object and list as clients read them: `completion_window` echoed as sent, the
native `batch_id`, and a paging cursor that names no batch refused (not a silent restart)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

OPENAI_LINE = {
    "custom_id": "a",
    "method": "POST",
    "url": "/v1/completions",
    "body": {"model": "small", "prompt": "the quick brown fox", "max_tokens": 3},
}


def jsonl(*lines: Any) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


async def native_batch(client: httpx.AsyncClient, **fields: str) -> httpx.Response:
    body = jsonl({"prompt": "the quick brown fox", "max_tokens": 3})
    files = {"file": ("in.jsonl", body, "application/jsonl")}
    return await client.post("/v1/batches", data={"model": "small", **fields}, files=files)


async def openai_batch(client: httpx.AsyncClient, completion_window: str) -> httpx.Response:
    files = {"file": ("in.jsonl", jsonl(OPENAI_LINE), "application/jsonl")}
    uploaded = await client.post("/v1/files", data={"purpose": "batch"}, files=files)
    assert uploaded.status_code == 200, uploaded.text
    body = {
        "input_file_id": uploaded.json()["id"],
        "endpoint": "/v1/completions",
        "completion_window": completion_window,
    }
    return await client.post("/v1/batches", json=body)


async def test_completion_window_is_echoed_as_sent(client: httpx.AsyncClient) -> None:
    for window in ("24h", "1h30m", "90m"):
        created = await openai_batch(client, window)
        assert created.status_code == 202, created.text
        assert created.json()["completion_window"] == window
        fetched = await client.get(f"/v1/batches/{created.json()['id']}")
        assert fetched.json()["completion_window"] == window
    native = await native_batch(client, deadline="90m")
    assert native.json()["completion_window"] == "90m"
    assert (await client.get(f"/v1/batches/{native.json()['id']}")).json()["completion_window"] == "90m"
    listed = (await client.get("/v1/batches")).json()["data"]
    assert [batch["completion_window"] for batch in listed] == ["90m", "90m", "1h30m", "24h"]


async def test_a_native_batch_without_a_deadline_has_the_longest_window(client: httpx.AsyncClient) -> None:
    assert (await native_batch(client)).json()["completion_window"] == "24h"


async def test_the_native_create_answers_with_a_batch_id(client: httpx.AsyncClient) -> None:
    created = await native_batch(client, deadline="6h")
    assert created.status_code == 202, created.text
    batch = created.json()
    assert batch["batch_id"] == batch["id"] and batch["batch_id"].startswith("batch_")
    assert (await client.get(f"/v1/batches/{batch['batch_id']}")).json()["batch_id"] == batch["batch_id"]


async def test_paging_after_an_unknown_batch_is_refused_not_restarted(
    client: httpx.AsyncClient, make_key: Callable[[str], str]
) -> None:
    ids = [(await native_batch(client)).json()["id"] for _ in range(3)]
    page = (await client.get("/v1/batches", params={"limit": 2})).json()
    assert [b["id"] for b in page["data"]] == ids[:0:-1] and page["has_more"]
    rest = (await client.get("/v1/batches", params={"limit": 2, "after": page["last_id"]})).json()
    assert [b["id"] for b in rest["data"]] == ids[:1] and not rest["has_more"]

    unknown = await client.get("/v1/batches", params={"after": "batch_0000000000000000deadbeef"})
    assert unknown.status_code == 400
    assert unknown.json()["error"] == {
        "message": "after='batch_0000000000000000deadbeef' names none of your batches; "
        "pass the last_id of the previous page",
        "type": "invalid_request_error",
        "param": "after",
        "code": "invalid_cursor",
    }
    # Another team's batch is no cursor either (and says nothing about that team's batches).
    other = await client.get(
        "/v1/batches", params={"after": ids[0]}, headers={"Authorization": f"Bearer {make_key('beta')}"}
    )
    assert other.status_code == 400


async def test_metadata_is_bounded_as_openai_bounds_it(client: httpx.AsyncClient) -> None:
    files = {"file": ("in.jsonl", jsonl(OPENAI_LINE), "application/jsonl")}
    uploaded = (await client.post("/v1/files", data={"purpose": "batch"}, files=files)).json()
    base = {"input_file_id": uploaded["id"], "endpoint": "/v1/completions"}
    for metadata in (
        {f"k{i}": "v" for i in range(17)},
        {"k" * 65: "v"},
        {"k": "v" * 513},
    ):
        refused = await client.post("/v1/batches", json={**base, "metadata": metadata})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "metadata", refused.text
    surrogate = json.dumps({**base, "metadata": {"k": "\ud800"}})  # as JSON may spell it
    refused = await client.post("/v1/batches", content=surrogate, headers={"content-type": "application/json"})
    assert refused.status_code == 400, refused.text
    kept = {f"k{i}": "v" * 512 for i in range(16)}
    created = await client.post("/v1/batches", json={**base, "metadata": kept})
    assert created.status_code == 202, created.text
    assert created.json()["metadata"] == kept
