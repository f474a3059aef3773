"""One parser of `Authorization: Bearer KEY` (gateway/auth.py's `bearer_key`) behind every door:
a missing or malformed header gets the same 401 and the same words from the HTTP edge (before a
byte of the body), from a route, and from the gRPC door's metadata."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc.aio as triton_aio
from fastapi import FastAPI
from tritonclient.grpc import InferInput
from tritonclient.utils import InferenceServerException

from contracts.errors import ApiError
from gateway.auth import bearer_key, unknown_key
from gateway.settings import GatewaySettings
from server_host.ports import free_ports

from .conftest import FakeBackend

# (header as sent, what the 401 says); None: no header at all.
BAD_HEADERS = [
    (None, "send an API key as 'Authorization: Bearer KEY'"),
    ("", "send an API key as 'Authorization: Bearer KEY'"),
    ("   ", "send an API key as 'Authorization: Bearer KEY'"),
    ("Basic dXNlcjpwYXNz", "must be 'Bearer KEY' (got scheme 'Basic')"),
    ("Bearer", "must be 'Bearer KEY' (got scheme 'Bearer')"),
    ("Bearer    ", "must be 'Bearer KEY' (got scheme 'Bearer')"),
    ("Bearer two words", "must be 'Bearer KEY' (got scheme 'Bearer')"),
    ("sy-a-key-without-scheme", "must be 'Bearer KEY' (got scheme 'sy-a-key-without-scheme')"),
]


@pytest.fixture
def settings(config_path: Path) -> GatewaySettings:
    (port,) = free_ports(1)
    return GatewaySettings(config=config_path, cancel_grace_s=0.5, sse_heartbeat_s=5.0, grpc_port=port)


@pytest.fixture
async def triton(app: FastAPI, settings: GatewaySettings) -> AsyncIterator[triton_aio.InferenceServerClient]:
    client = triton_aio.InferenceServerClient(f"127.0.0.1:{settings.grpc_port}")
    yield client
    await client.close()


def refusal(header: str | None) -> str:
    """The message `bearer_key` refuses `header` with."""
    with pytest.raises(ApiError) as refused:
        bearer_key(header)
    assert refused.value.status_code == 401 and refused.value.error_type == "authentication_error"
    return refused.value.message


@pytest.mark.parametrize(("header", "says"), BAD_HEADERS)
def test_the_parser_refuses_each_bad_header_saying_how_to_fix_it(header: str | None, says: str) -> None:
    message = refusal(header)
    assert says in message and "switchyard keys create TEAM" in message


@pytest.mark.parametrize("header", ["Bearer sy-k", "bearer sy-k", "BEARER   sy-k  ", "  Bearer sy-k"])
def test_the_scheme_in_any_case_and_spaces_around_the_key_pass(header: str) -> None:
    assert bearer_key(header) == "sy-k"


@pytest.mark.parametrize(("header", "says"), BAD_HEADERS)
async def test_the_http_edge_answers_as_the_parser(anonymous: httpx.AsyncClient, header: str | None, says: str) -> None:
    headers = {} if header is None else {"Authorization": header}
    reply = await anonymous.post("/v1/generate", content=b"{not json", headers=headers)
    assert reply.status_code == 401 and reply.headers["www-authenticate"] == "Bearer"
    assert reply.json()["error"]["message"] == refusal(header)


@pytest.mark.parametrize(("header", "says"), BAD_HEADERS)
async def test_the_grpc_door_answers_as_the_parser(
    triton: triton_aio.InferenceServerClient, backend: FakeBackend, header: str | None, says: str
) -> None:
    prompt = InferInput("text_input", [1], "BYTES")
    prompt.set_data_from_numpy(np.array([b"hi"], dtype=np.object_))
    headers = {} if header is None else {"authorization": header}
    with pytest.raises(InferenceServerException) as refused:
        await triton.infer("small", [prompt], headers=headers)
    assert refused.value.status() == "StatusCode.UNAUTHENTICATED"
    assert refusal(header) in str(refused.value.message())
    assert backend.requests == []


async def test_an_unknown_key_is_the_same_401_at_each_door(
    anonymous: httpx.AsyncClient, triton: triton_aio.InferenceServerClient
) -> None:
    reply = await anonymous.get("/v1/models", headers={"Authorization": "Bearer sy-not-a-key"})
    assert reply.status_code == 401 and reply.json()["error"]["message"] == unknown_key().message
    with pytest.raises(InferenceServerException) as refused:
        await triton.get_model_metadata("small", headers={"authorization": "Bearer sy-not-a-key"})
    assert refused.value.status() == "StatusCode.UNAUTHENTICATED"
    assert unknown_key().message in str(refused.value.message())
