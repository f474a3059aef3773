"""The gRPC front door on the real app (real Redis, the FakeBackend), through unmodified
`tritonclient.grpc.aio`: the same replies, keys, shares, idempotency, cancellation and metering
as HTTP, and Triton's status codes for every refusal."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import redis
import tritonclient.grpc.aio as triton_aio
from fastapi import FastAPI
from tritonclient.grpc import InferInput, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from gateway.settings import GatewaySettings
from quota.capacity import StaticCapacity
from quota.keys import SyncKeyStore, hash_key
from server_host.ports import free_ports
from tests.auth_headers import bearer

from .conftest import FakeBackend

# grpc.aio runs on the gateway's loop, uvloop's (gateway/server.py): every test on both.
pytestmark = pytest.mark.asyncio(loop_factories=["asyncio", "uvloop"])
POOL_TOKENS = 100  # alpha and beta: 50 each while both want room
Until = Callable[[Callable[[], bool]], Any]


@pytest.fixture
def capacity() -> StaticCapacity:
    return StaticCapacity({"small": POOL_TOKENS, "large": POOL_TOKENS})


@pytest.fixture
def settings(config_path: Path) -> GatewaySettings:
    (port,) = free_ports(1)
    return GatewaySettings(config=config_path, cancel_grace_s=0.5, sse_heartbeat_s=5.0, grpc_port=port)


@pytest.fixture
def door_url(app: FastAPI, settings: GatewaySettings) -> str:
    return f"127.0.0.1:{settings.grpc_port}"


@pytest.fixture
async def triton(door_url: str) -> AsyncIterator[triton_aio.InferenceServerClient]:
    client = triton_aio.InferenceServerClient(door_url)
    yield client
    await client.close()


def tensor(name: str, values: list[Any], datatype: str) -> InferInput:
    array = np.array([v.encode() if isinstance(v, str) else v for v in values], dtype=_DTYPES[datatype])
    item = InferInput(name, list(array.shape), datatype)
    item.set_data_from_numpy(array)
    return item


_DTYPES = {"BYTES": np.object_, "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_, "FP32": np.float32}


def llm_inputs(prompt: str = "the quick brown fox", max_tokens: int = 3, **extra: tuple[list[Any], str]) -> list[Any]:
    inputs = [tensor("text_input", [prompt], "BYTES"), tensor("max_tokens", [max_tokens], "INT32")]
    return inputs + [tensor(name, values, datatype) for name, (values, datatype) in extra.items()]


async def stream(
    client: triton_aio.InferenceServerClient,
    requests: list[dict[str, Any]],
    headers: dict[str, str],
    *,
    cancel_after: int | None = None,
) -> list[tuple[Any, Any]]:
    """Every (result, error) of one ModelStreamInfer call carrying `requests`, until each has
    its final response (or `cancel_after` responses, then the call is cancelled)."""

    async def requests_then_wait() -> AsyncIterator[dict[str, Any]]:
        for request in requests:
            yield request

    got: list[tuple[Any, Any]] = []
    finals = 0
    responses = client.stream_infer(requests_then_wait(), headers=headers)
    async for result, error in responses:
        got.append((result, error))
        final = error is not None or result.get_response().parameters["triton_final_response"].bool_param
        finals += int(final)
        if cancel_after is not None and len(got) >= cancel_after:
            responses.cancel()
            break
        if finals == len(requests):
            break
    return got


async def test_a_whole_reply_equals_http_and_is_metered_once_under_the_grpc_door(
    triton: triton_aio.InferenceServerClient, client: httpx.AsyncClient, team_key: str, app: FastAPI
) -> None:
    http = await client.post("/v1/generate", json={"model": "small", "prompt": "the quick brown fox", "max_tokens": 3})
    result = await triton.infer("small", llm_inputs(), request_id="whole-1", headers=bearer(team_key))
    assert result.as_numpy("text_output")[0].decode() == http.json()["text"] == "Hello, world"
    assert result.as_numpy("output_token_ids").tolist() == [5, 6, 7, 8]
    assert result.as_numpy("finish_reason")[0].decode() == "length"
    assert int(result.as_numpy("completion_tokens")[0]) == http.json()["usage"]["completion_tokens"] == 4
    assert result.get_response().id == "whole-1"
    await app.state.services.registry.settled()
    registry = app.state.metrics.registry
    labels = {"team": "alpha", "model": "small"}
    assert registry.get_sample_value("switchyard_usage_door_requests_total", {**labels, "door": "grpc"}) == 1
    assert registry.get_sample_value("switchyard_usage_door_requests_total", {**labels, "door": "http"}) == 1
    usage = (await client.get("/v1/usage")).json()
    assert sum(row["requests"] for row in usage["data"]) == 2


async def test_a_whole_reply_that_fails_after_text_bills_no_completion(
    triton: triton_aio.InferenceServerClient,
    client: httpx.AsyncClient,
    team_key: str,
    app: FastAPI,
    backend: FakeBackend,
) -> None:
    """ModelInfer answers whole even when the `stream` input says true: a failure after text
    reached no one, so its 3 tokens are discarded, not billed (as on /v1/generate)."""
    backend.error_after = 2
    with pytest.raises(InferenceServerException):
        await triton.infer("small", llm_inputs(stream=([True], "BOOL")), headers=bearer(team_key))
    await app.state.services.registry.settled()
    rows = (await client.get("/v1/usage")).json()["data"]
    assert [(row["requests"], row["completion_tokens"], row["discarded_tokens"]) for row in rows] == [(1, 0, 3)]


async def test_a_stream_sends_each_delta_then_a_final_response(
    triton: triton_aio.InferenceServerClient, team_key: str, backend: FakeBackend
) -> None:
    request = {"model_name": "small", "inputs": llm_inputs(), "request_id": "s-1"}
    got = await stream(triton, [request], bearer(team_key))
    assert all(error is None for _, error in got)
    texts = [result.as_numpy("text_output")[0].decode() for result, _ in got]
    finals = [result.get_response().parameters["triton_final_response"].bool_param for result, _ in got]
    assert texts == ["Hello", ", ", "world", ""] and finals == [False, False, False, True]
    assert got[-1][0].as_numpy("finish_reason")[0].decode() == "length"
    assert [int(result.as_numpy("completion_tokens")[0]) for result, _ in got] == [2, 3, 4, 4]
    assert backend.requests[0].cache_namespace == "alpha"  # the gateway's team, never the caller's


async def test_two_requests_on_one_stream_are_two_generations(
    triton: triton_aio.InferenceServerClient, team_key: str, backend: FakeBackend
) -> None:
    requests = [{"model_name": "small", "inputs": llm_inputs(), "request_id": f"two-{i}"} for i in range(2)]
    got = await stream(triton, requests, bearer(team_key))
    ids = {result.get_response().id for result, _ in got}
    assert ids == {"two-0", "two-1"} and len(backend.requests) == 2


@pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer sy-not-a-key"}, {"authorization": "Basic abc"}])
async def test_no_key_or_a_bad_one_is_unauthenticated(
    triton: triton_aio.InferenceServerClient, headers: dict[str, str], backend: FakeBackend
) -> None:
    with pytest.raises(InferenceServerException) as refused:
        await triton.infer("small", llm_inputs(), headers=headers)
    assert refused.value.status() == "StatusCode.UNAUTHENTICATED"
    with pytest.raises(grpc.aio.AioRpcError) as ended:  # a stream's call ends with the status
        await stream(triton, [{"model_name": "small", "inputs": llm_inputs()}], headers)
    assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert backend.requests == []


async def test_another_teams_model_and_an_unknown_one(
    triton: triton_aio.InferenceServerClient, make_key: Callable[[str], str]
) -> None:
    beta = bearer(make_key("beta"))  # beta may use `small` only
    for call in (triton.infer("large", llm_inputs(), headers=beta), triton.get_model_metadata("large", headers=beta)):
        with pytest.raises(InferenceServerException) as refused:
            await call
        assert refused.value.status() == "StatusCode.PERMISSION_DENIED"
    with pytest.raises(InferenceServerException) as unknown:
        await triton.infer("nope", llm_inputs(), headers=beta)
    assert unknown.value.status() == "StatusCode.NOT_FOUND" and "small" in str(unknown.value)


@pytest.mark.parametrize(
    ("inputs", "needle"),
    [
        (llm_inputs(max_tokens=0), "max_tokens"),
        (llm_inputs(prompt=""), "text_input"),
        ([tensor("text_input", ["hi"], "BYTES"), tensor("max_tokens", [3], "INT64")], "max_tokens"),
        ([tensor("text_input", ["hi"], "BYTES")], "max_tokens"),
        (llm_inputs(cache_namespace=(["beta"], "BYTES")), "cache_namespace"),
        (llm_inputs(resume_token_ids=([1, 2], "INT32")), "resume_token_ids"),
        (llm_inputs(input_ids=([1, 2], "INT32")), "input_ids"),  # the gateway encodes the text itself
        (llm_inputs(temperature=([5.0], "FP32")), "temperature"),
        (llm_inputs(request_class=(["urgent"], "BYTES")), "request_class"),
        (llm_inputs(stop=(["a", "b", "c", "d", "e"], "BYTES")), "stop"),
    ],
)
async def test_bad_tensors_are_invalid_argument_naming_the_input(
    triton: triton_aio.InferenceServerClient, team_key: str, backend: FakeBackend, inputs: list[Any], needle: str
) -> None:
    with pytest.raises(InferenceServerException) as refused:
        await triton.infer("small", inputs, headers=bearer(team_key))
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert needle in str(refused.value)
    assert backend.requests == []


async def test_over_share_is_resource_exhausted_with_when_to_retry(
    door_url: str, triton: triton_aio.InferenceServerClient, team_key: str, make_key: Callable[[str], str],
    backend: FakeBackend, until: Until,
) -> None:  # fmt: skip
    backend.hold_after = 0
    beta = bearer(make_key("beta"))
    held = [asyncio.create_task(triton.infer("small", llm_inputs(max_tokens=26), headers=beta))]
    await until(lambda: len(backend.requests) == 1)
    held.append(asyncio.create_task(triton.infer("small", llm_inputs(max_tokens=46), headers=bearer(team_key))))
    await until(lambda: len(backend.requests) == 2)
    async with grpc.aio.insecure_channel(door_url) as channel:  # a raw call, to read the trailer
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="small")
        for item in llm_inputs(max_tokens=26):
            request.inputs.append(item._get_tensor())
            request.raw_input_contents.append(item._get_content())
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ModelInfer(request, metadata=tuple(bearer(team_key).items()))
    error = refused.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "team 'alpha' holds 50 KV tokens" in (error.details() or "") and "retry after" in (error.details() or "")
    retry = dict(error.trailing_metadata() or ())["retry-after"]
    assert 1 <= int(retry) <= 30
    backend.resume.set()
    await asyncio.gather(*held)


async def test_a_repeated_id_attaches_instead_of_generating_twice(
    triton: triton_aio.InferenceServerClient, team_key: str, backend: FakeBackend
) -> None:
    first = await triton.infer("small", llm_inputs(), request_id="again-1", headers=bearer(team_key))
    second = await triton.infer("small", llm_inputs(), request_id="again-1", headers=bearer(team_key))
    assert second.as_numpy("text_output")[0] == first.as_numpy("text_output")[0]
    assert len(backend.requests) == 1
    with pytest.raises(InferenceServerException) as conflict:  # the same id, another request
        await triton.infer("small", llm_inputs(max_tokens=4), request_id="again-1", headers=bearer(team_key))
    assert conflict.value.status() == "StatusCode.ALREADY_EXISTS"


async def test_cancelling_the_call_cancels_the_generation(
    triton: triton_aio.InferenceServerClient, team_key: str, backend: FakeBackend, until: Until
) -> None:
    backend.hold_after = 1
    request = {"model_name": "small", "inputs": llm_inputs(), "request_id": "cancel-1"}
    got = await stream(triton, [request], bearer(team_key), cancel_after=1)
    assert got[0][0].as_numpy("text_output")[0] == b"Hello"
    # The stream's last reader left: the registry cancels the request on the backend (the real
    # one then stops the engine, which frees the KV at its next step).
    await until(lambda: backend.requests[0].request_id in backend.cancel_calls)


async def test_metadata_and_what_is_not_served(triton: triton_aio.InferenceServerClient, team_key: str) -> None:
    assert await triton.is_server_live() and await triton.is_server_ready()
    assert await triton.is_model_ready("small", headers=bearer(team_key))
    metadata = await triton.get_model_metadata("small", headers=bearer(team_key), as_json=True)
    names = [item["name"] for item in metadata["inputs"]]
    assert names[:2] == ["text_input", "max_tokens"] and "cache_namespace" not in names
    assert "resume_token_ids" not in names and "input_ids" not in names
    config = await triton.get_model_config("small", headers=bearer(team_key), as_json=True)
    assert config["config"]["model_transaction_policy"]["decoupled"] is True
    # The door's prompt is its text (`llm` may also take ids, but only from the gateway).
    required = [item["name"] for item in config["config"]["input"] if not item.get("optional")]
    assert required == ["text_input", "max_tokens"]
    with pytest.raises(InferenceServerException) as refused:
        await triton.get_model_repository_index(headers=bearer(team_key))
    assert refused.value.status() == "StatusCode.UNIMPLEMENTED" and "ModelInfer" in str(refused.value)


async def test_a_refused_request_on_a_stream_is_its_error_response_and_the_others_run(
    triton: triton_aio.InferenceServerClient, team_key: str, backend: FakeBackend
) -> None:
    bad = {"model_name": "small", "inputs": llm_inputs(max_tokens=0), "request_id": "bad"}
    good = {"model_name": "small", "inputs": llm_inputs(), "request_id": "good"}
    got = await stream(triton, [bad, good], bearer(team_key))
    errors = [str(error) for _, error in got if error is not None]
    assert len(errors) == 1 and errors[0].startswith("INVALID_ARGUMENT") and "max_tokens" in errors[0]
    assert "".join(r.as_numpy("text_output")[0].decode() for r, e in got if e is None) == "Hello, world"
    assert len(backend.requests) == 1


async def test_a_revoked_key_is_refused_on_both_doors_within_the_key_cache_period(
    triton: triton_aio.InferenceServerClient, client: httpx.AsyncClient, team_key: str, redis_url: str, app: FastAPI
) -> None:
    """Both doors resolve keys through the worker's one KeyCache: a key revoked elsewhere (the
    CLI, another worker's console) stops working at both within `gateway.key_cache_s`."""
    assert (await triton.infer("small", llm_inputs(), headers=bearer(team_key))).as_numpy("text_output") is not None
    assert (await client.get("/v1/models")).status_code == 200  # both doors have the answer cached
    with redis.Redis.from_url(redis_url) as admin:  # as `switchyard keys revoke` does
        assert SyncKeyStore(admin, {}).revoke(hash_key(team_key))
    revoked_at = time.monotonic()

    async def refused_at_the_door() -> bool:
        try:
            await triton.infer("small", llm_inputs(), headers=bearer(team_key))
        except InferenceServerException as refused:
            return refused.status() == "StatusCode.UNAUTHENTICATED"
        return False

    period = app.state.services.config.gateway.key_cache_s
    while not await refused_at_the_door():
        assert time.monotonic() - revoked_at < period + 10, "the door still took a revoked key"
        await asyncio.sleep(0.1)
    assert (await client.get("/v1/models")).status_code == 401  # the HTTP door's answer lapsed too
