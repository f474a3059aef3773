"""Batches through the gateway app (fake backend) and a dispatcher in the same event loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from bulk.batch_lines import BatchEntry
from bulk.blob_store import LocalBlobStore
from bulk.chunk_queue import chunks_key
from bulk.dispatcher import Dispatcher
from bulk.gateway_client import GatewaySubmitter, Submission, Verdict
from bulk.pool_loads import LivePoolLoads
from contracts.generation import GenerationDelta, GenerationRequest, RequestRejected
from quota.capacity import StaticCapacity
from quota.lease_size import bulk_lease_tokens

from .conftest import FakeBackend


@pytest.fixture
def config_path(config_path: Path) -> Path:
    """The gateway tests' config with small batch limits."""
    config_path.write_text(
        config_path.read_text() + "bulk: {max_requests_per_batch: 50, results_flush_s: 0.05, reclaim_idle_s: 0.3}\n"
    )
    return config_path


def jsonl(*lines: Any) -> bytes:
    return b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)


@pytest.fixture
async def make_dispatcher(
    app: FastAPI, admin_key: str, redis_url: str, capacity: StaticCapacity
) -> AsyncIterator[Callable[[str], Dispatcher]]:
    """`make_dispatcher(name)`: a dispatcher in this event loop, submitting to the app in-process."""
    services = app.state.services
    client = aioredis.Redis.from_url(redis_url)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as http:

        def make(name: str) -> Dispatcher:
            return Dispatcher(
                services.config,
                client,
                LocalBlobStore(services.config.blob_path),
                services.catalog,
                GatewaySubmitter(http, admin_key),
                LivePoolLoads(capacity, services.admission.store),
                consumer=name,
                refresh_s=0.0,  # every step sees cancels and deadlines at once
            )

        yield make
    await client.aclose()


@pytest.fixture
def dispatcher(make_dispatcher: Callable[[str], Dispatcher]) -> Dispatcher:
    return make_dispatcher("test-dispatcher")


async def run_until(dispatcher: Dispatcher, done: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await done():
        assert loop.time() < deadline, "timed out"
        await dispatcher.step()
        await asyncio.sleep(0.01)


async def submit(client: httpx.AsyncClient, body: bytes, **fields: str) -> httpx.Response:
    return await client.post(
        "/v1/batches", data={"model": "small", **fields}, files={"file": ("in.jsonl", body, "application/jsonl")}
    )


async def test_native_batch_runs_to_completion(
    client: httpx.AsyncClient, dispatcher: Dispatcher, backend: FakeBackend
) -> None:
    body = jsonl(
        {"prompt": "the quick brown fox", "max_tokens": 3, "custom_id": "a"},
        b"{not json",
        {"prompt": "the lazy dog", "max_tokens": 3},
    )
    created = await submit(client, body, deadline="1h")
    assert created.status_code == 202, created.text
    batch = created.json()
    assert batch["status"] == "in_progress"
    assert batch["counts"] == {"total": 3, "done": 0, "failed": 1, "expired": 0, "pending": 2}

    async def ended() -> bool:
        return (await client.get(f"/v1/batches/{batch['id']}")).json()["status"] == "completed"

    await run_until(dispatcher, ended)
    final = (await client.get(f"/v1/batches/{batch['id']}")).json()
    assert final["counts"] == {"total": 3, "done": 2, "failed": 1, "expired": 0, "pending": 0}
    results = [json.loads(line) for line in (await client.get(final["links"]["results"])).text.splitlines()]
    assert sorted(r["line"] for r in results) == [1, 3]
    assert {r["response"]["body"]["text"] for r in results} == {"Hello, world"}
    assert all(request.request_class == "bulk" for request in backend.requests)
    errors = [json.loads(line) for line in (await client.get(final["links"]["errors"])).text.splitlines()]
    assert [(e["line"], e["error"]["code"]) for e in errors] == [(2, "invalid_json")]


async def test_another_team_sees_no_batch(
    client: httpx.AsyncClient, make_key: Callable[[str], str], app: FastAPI
) -> None:
    batch = (await submit(client, jsonl({"prompt": "the fox", "max_tokens": 2}))).json()
    other = {"Authorization": f"Bearer {make_key('beta')}"}
    for method, suffix in (("GET", ""), ("GET", "/results"), ("GET", "/errors"), ("POST", "/cancel")):
        reply = await client.request(method, f"/v1/batches/{batch['id']}{suffix}", headers=other)
        assert reply.status_code == 404, suffix
    assert (await client.get("/v1/batches", headers=other)).json()["data"] == []
    assert (await client.get(f"/v1/batches/{batch['id']}")).json()["status"] == "in_progress"


@pytest.mark.parametrize(
    ("body", "fields", "status", "words"),
    [
        (b"a,b\n1,2\n", {}, 400, "JSONL"),
        (jsonl({"prompt": "x"}), {}, 400, "max_tokens is required"),
        (jsonl({"prompt": "x", "max_tokens": 1}), {"deadline": "25h"}, 400, "24h"),
        (jsonl({"prompt": "x", "max_tokens": 1}), {"model": "nope"}, 404, "nope"),
        (jsonl(*[{"prompt": "x", "max_tokens": 1}] * 51), {}, 413, "at most 50 "),
    ],
)
async def test_refused_uploads(
    client: httpx.AsyncClient, body: bytes, fields: dict[str, str], status: int, words: str
) -> None:
    reply = await client.post(
        "/v1/batches",
        data={"model": "small", **fields},
        files={"file": ("in.jsonl", body, "application/jsonl")},
    )
    assert reply.status_code == status, reply.text
    assert words in reply.json()["error"]["message"]
    assert (await client.get("/v1/batches")).json()["data"] == []


async def test_fields_after_the_file_still_make_a_batch(client: httpx.AsyncClient) -> None:
    boundary = "sy-boundary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="late.jsonl"\r\n\r\n'
        '{"prompt": "the fox", "max_tokens": 2}\n'
        f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nsmall'
        f"\r\n--{boundary}--\r\n"
    ).encode()
    reply = await client.post(
        "/v1/batches", content=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    assert reply.status_code == 202, reply.text
    assert reply.json()["counts"]["total"] == 1 and reply.json()["filename"] == "late.jsonl"


async def test_cancel_lets_running_entries_end_and_cancels_the_rest(
    client: httpx.AsyncClient, dispatcher: Dispatcher, backend: FakeBackend
) -> None:
    backend.hold_after = 1
    batch = (await submit(client, jsonl(*[{"prompt": f"fox {i}", "max_tokens": 3} for i in range(40)]))).json()

    async def running() -> bool:
        return len(backend.requests) >= 3

    await run_until(dispatcher, running)
    cancelling = (await client.post(f"/v1/batches/{batch['id']}/cancel")).json()
    assert cancelling["status"] == "cancelling" and cancelling["cancelling_at"] is not None
    await dispatcher.step()  # sees the cancel
    running_at_cancel = len(backend.requests)
    assert 3 <= running_at_cancel < 40
    backend.resume.set()  # the running entries go on to their end

    async def ended() -> bool:
        return (await client.get(f"/v1/batches/{batch['id']}")).json()["status"] == "cancelled"

    await run_until(dispatcher, ended)
    final = (await client.get(f"/v1/batches/{batch['id']}")).json()
    assert len(backend.requests) == running_at_cancel  # none started after
    assert final["counts"]["done"] == running_at_cancel  # none cut
    assert final["counts"]["failed"] == 40 - running_at_cancel and final["counts"]["pending"] == 0
    errors = (await client.get(final["links"]["errors"])).text.splitlines()
    assert {json.loads(e)["error"]["code"] for e in errors} == {"batch_cancelled"}
    assert final["cancelled_at"] is not None and final["output_file_id"] is not None


async def test_an_entry_whose_server_fails_is_retried_then_failed_with_the_reason(
    client: httpx.AsyncClient, dispatcher: Dispatcher, backend: FakeBackend
) -> None:
    backend.error_after = 1  # every attempt fails after its first delta: a broken stream
    batch = (await submit(client, jsonl({"prompt": "the fox", "max_tokens": 3, "custom_id": "x"}))).json()

    async def ended() -> bool:
        return (await client.get(f"/v1/batches/{batch['id']}")).json()["status"] == "completed"

    await run_until(dispatcher, ended)
    assert len(backend.requests) == 3  # bulk.max_attempts
    assert len({request.request_id for request in backend.requests}) == 3
    (error,) = [json.loads(line) for line in (await client.get(f"/v1/batches/{batch['id']}/errors")).text.splitlines()]
    assert error["custom_id"] == "x" and error["response"] is None
    assert error["error"]["message"].startswith("failed after 3 attempts: ")


async def test_expiry_keeps_finished_results(
    client: httpx.AsyncClient, dispatcher: Dispatcher, backend: FakeBackend
) -> None:
    backend.hold_after = 1
    batch = (
        await submit(client, jsonl(*[{"prompt": f"fox {i}", "max_tokens": 3} for i in range(5)]), deadline="1s")
    ).json()
    await run_until(dispatcher, lambda: _status_is(client, batch["id"], "expired"), timeout_s=15)
    final = (await client.get(f"/v1/batches/{batch['id']}")).json()
    assert final["counts"] == {"total": 5, "done": 0, "failed": 0, "expired": 5, "pending": 0}
    assert dispatcher.inflight() == 0  # the running entries were stopped (over HTTP: hung up on)
    errors = [json.loads(e) for e in (await client.get(final["links"]["errors"])).text.splitlines()]
    assert sorted(e["line"] for e in errors) == [1, 2, 3, 4, 5]


async def test_entries_whose_chunk_is_gone_unmarked_still_expire_at_the_deadline(
    client: httpx.AsyncClient, dispatcher: Dispatcher, redis_url: str
) -> None:
    """The partition run: chunks acknowledged on the strength of marks a split brain then
    dropped left their lines with no result and no chunk, and the deadline's sweep (which
    reads the chunks left) never ended them: the batch stayed in_progress for good. The sweep
    finds such lines from the input itself."""
    batch = (
        await submit(client, jsonl(*[{"prompt": f"fox {i}", "max_tokens": 3} for i in range(3)]), deadline="1s")
    ).json()
    async with aioredis.Redis.from_url(redis_url) as r:
        await r.delete(chunks_key(batch["id"]))  # acknowledged and deleted, no line marked
    await run_until(dispatcher, lambda: _status_is(client, batch["id"], "expired"), timeout_s=15)
    final = (await client.get(f"/v1/batches/{batch['id']}")).json()
    assert final["counts"] == {"total": 3, "done": 0, "failed": 0, "expired": 3, "pending": 0}
    errors = [json.loads(e) for e in (await client.get(final["links"]["errors"])).text.splitlines()]
    assert sorted(e["line"] for e in errors) == [1, 2, 3]
    assert {e["error"]["code"] for e in errors} == {"batch_expired"}


async def _status_is(client: httpx.AsyncClient, batch_id: str, status: str) -> bool:
    return bool((await client.get(f"/v1/batches/{batch_id}")).json()["status"] == status)


async def test_a_dead_dispatchers_entries_are_taken_over_and_recorded_once(
    client: httpx.AsyncClient, make_dispatcher: Callable[[str], Dispatcher], backend: FakeBackend
) -> None:
    backend.hold_after = 1
    batch = (await submit(client, jsonl(*[{"prompt": f"fox {i}", "max_tokens": 3} for i in range(10)]))).json()
    first, second = make_dispatcher("first"), make_dispatcher("second")

    async def first_holds_all() -> bool:
        return len(backend.requests) == 10

    await run_until(first, first_holds_all)  # then `first` stops stepping: as good as dead

    async def second_took_over() -> bool:
        return len(backend.requests) > 10

    # The first one's chunks went idle: reclaimed and run again (two at a time: the first
    # one's leases look like people being served to the second).
    await run_until(second, second_took_over)
    backend.resume.set()  # both copies of the entries run twice now finish

    async def ended() -> bool:
        await first.step()  # the slow one comes back: its results are duplicates
        return await _status_is(client, batch["id"], "completed")

    await run_until(second, ended)
    final = (await client.get(f"/v1/batches/{batch['id']}")).json()
    assert final["counts"] == {"total": 10, "done": 10, "failed": 0, "expired": 0, "pending": 0}
    results = [json.loads(line) for line in (await client.get(final["links"]["results"])).text.splitlines()]
    assert sorted(r["line"] for r in results) == list(range(1, 11))


async def test_a_team_held_at_its_limit_holds_no_other_team(
    client: httpx.AsyncClient,
    make_key: Callable[[str], str],
    app: FastAPI,
    redis_url: str,
    capacity: StaticCapacity,
    admin_key: str,
) -> None:
    """alpha's entries come back 429 (its daily tokens spent, say): only alpha waits."""
    beta = {"Authorization": f"Bearer {make_key('beta')}"}
    alpha_batch = (await submit(client, jsonl({"prompt": "alpha fox", "max_tokens": 2}))).json()
    beta_batch = (
        await client.post(
            "/v1/batches",
            data={"model": "small"},
            files={"file": ("in.jsonl", jsonl({"prompt": "beta fox", "max_tokens": 2}), "application/jsonl")},
            headers=beta,
        )
    ).json()
    services = app.state.services
    asked: list[str] = []

    class AlphaAtItsLimit:
        def __init__(self, inner: GatewaySubmitter) -> None:
            self.inner = inner

        async def submit(self, team_id: str, batch_id: str, entry: BatchEntry, attempt: int) -> Submission:
            asked.append(team_id)
            if team_id == "alpha":
                error = {"code": "rate_limit_error", "message": "daily tokens spent", "status_code": 429}
                return Submission(Verdict.LATER, "x", error=error, retry_after_s=3600)
            return await self.inner.submit(team_id, batch_id, entry, attempt)

    redis_client = aioredis.Redis.from_url(redis_url)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as http:
        dispatcher = Dispatcher(
            services.config, redis_client, LocalBlobStore(services.config.blob_path), services.catalog,
            AlphaAtItsLimit(GatewaySubmitter(http, admin_key)), LivePoolLoads(capacity, services.admission.store),
            consumer="limits", refresh_s=0.0,
        )  # fmt: skip

        async def beta_done() -> bool:
            reply = await client.get(f"/v1/batches/{beta_batch['id']}", headers=beta)
            return bool(reply.json()["status"] == "completed")

        await run_until(dispatcher, beta_done)
        for _ in range(20):
            await dispatcher.step()
    await redis_client.aclose()
    assert asked.count("alpha") == 1  # asked once, then held for its Retry-After
    assert (await client.get(f"/v1/batches/{alpha_batch['id']}")).json()["counts"]["pending"] == 1


@pytest.mark.parametrize("fraction", [1.0, 0.5])
async def test_the_dispatcher_counts_what_bulk_leases(
    client: httpx.AsyncClient, app: FastAPI, redis_url: str, fraction: float
) -> None:
    """With `bulk.lease_fraction` below 1 the dispatcher fits as many more entries into a pool's
    room as the gateway will lease less for them (entries held in flight: nothing ends)."""
    body = jsonl(*({"prompt": "the quick brown fox", "max_tokens": 50} for _ in range(40)))
    created = await submit(client, body)
    assert created.status_code == 202, created.text
    services = app.state.services
    bulk = services.config.bulk.model_copy(update={"lease_fraction": fraction})
    config = services.config.model_copy(update={"bulk": bulk})
    held: list[BatchEntry] = []
    let_go = asyncio.Event()

    class Holding:
        async def submit(self, team_id: str, batch_id: str, entry: BatchEntry, attempt: int) -> Submission:
            held.append(entry)
            await let_go.wait()
            return Submission(Verdict.LATER, "held")

    capacity = StaticCapacity({"small": 1000, "large": 1000})
    redis_client = aioredis.Redis.from_url(redis_url)
    dispatcher = Dispatcher(
        config, redis_client, LocalBlobStore(config.blob_path), services.catalog, Holding(),
        LivePoolLoads(capacity, services.admission.store), consumer="lease", refresh_s=0.0,
    )  # fmt: skip
    await dispatcher.step()
    await asyncio.sleep(0.05)  # the released entries reach the submitter
    let_go.set()
    while dispatcher.inflight():
        await asyncio.sleep(0.01)
    await redis_client.aclose()
    lease = bulk_lease_tokens(held[0].cost_tokens, fraction)
    usable = int(1000 * (1 - config.bulk.interactive_reserve_fraction))
    assert len(held) == usable // lease < config.bulk.max_inflight_per_pool


async def test_an_entry_a_server_refuses_fails_once_with_the_reason_and_the_rest_run(
    client: httpx.AsyncClient, dispatcher: Dispatcher, backend: FakeBackend
) -> None:
    """A refusal of the input is a 400 to the dispatcher: failed with the reason, never retried
    (it used to be a 503: retried without end, pausing the pool's bulk)."""
    real_generate = backend.generate

    def refusing(request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        if request.prompt == "refused":
            backend.requests.append(request)
            return _raises(RequestRejected("cpu_engine: top_p must be in (0, 1], got 0.0"))
        deltas: AsyncIterator[GenerationDelta] = real_generate(request)
        return deltas

    backend.generate = refusing  # type: ignore[method-assign]
    body = jsonl({"prompt": "refused", "max_tokens": 3, "custom_id": "bad"}, {"prompt": "the fox", "max_tokens": 3})
    batch = (await submit(client, body)).json()

    async def ended() -> bool:
        return (await client.get(f"/v1/batches/{batch['id']}")).json()["status"] == "completed"

    await run_until(dispatcher, ended)
    final = (await client.get(f"/v1/batches/{batch['id']}")).json()
    assert final["counts"] == {"total": 2, "done": 1, "failed": 1, "expired": 0, "pending": 0}
    assert [r.prompt for r in backend.requests].count("refused") == 1  # not retried
    (error,) = [json.loads(line) for line in (await client.get(f"/v1/batches/{batch['id']}/errors")).text.splitlines()]
    assert error["custom_id"] == "bad"
    assert "top_p must be in (0, 1]" in error["error"]["message"]


async def _raises(exc: Exception) -> AsyncIterator[GenerationDelta]:
    raise exc
    yield GenerationDelta()  # pragma: no cover - makes this a generator


async def test_ids_that_name_other_keys_are_404_not_500(client: httpx.AsyncClient) -> None:
    batch = (await submit(client, jsonl({"prompt": "the fox", "max_tokens": 2}))).json()
    for suffix in (":chunks", ":marks", ":segments", ":finalizer"):
        assert (await client.get(f"/v1/batches/{batch['id']}{suffix}")).status_code == 404, suffix
    assert (await client.get("/v1/files/file-x:users")).status_code == 404
    assert (await client.get("/v1/batches/%ED%A0%80")).status_code == 404  # not UTF-8


async def test_an_enormous_deadline_is_a_400(client: httpx.AsyncClient) -> None:
    reply = await submit(client, jsonl({"prompt": "x", "max_tokens": 1}), deadline="9" * 400 + "s")
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "deadline"
