"""Only the gateway reaches the models: Triton refuses inference without the gateway's key.

The `llm` model takes fields only the gateway may set (a team's prefix-cache namespace, and
`cpu_engine` a request id to cancel); they are trustworthy because nobody else can call any
model at all (docs/security.md). Health and metadata stay open for the probes.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from config.internal_secrets import TRITON_GRPC_KEY_HEADER, TRITON_KEY_HEADER

from .conftest import POOL_ID, LiveGateway, TritonPool

pytestmark = pytest.mark.integration

WRONG_KEYS = [None, {TRITON_GRPC_KEY_HEADER: "not-the-key", TRITON_KEY_HEADER: "not-the-key"}]


def _tensor(name: str, array: np.ndarray) -> grpcclient.InferInput:  # type: ignore[type-arg]
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


def _infer(pool: TritonPool, model: str, inputs: list[grpcclient.InferInput], headers: dict[str, str] | None) -> None:
    client = grpcclient.InferenceServerClient(pool.grpc_url)
    try:
        client.infer(model, inputs, headers=headers)
    finally:
        client.close()


@pytest.mark.parametrize("headers", WRONG_KEYS, ids=["no key", "wrong key"])
def test_grpc_inference_without_the_key_is_refused(triton_pool: TritonPool, headers: dict[str, str] | None) -> None:
    text = [_tensor("text_input", np.array([b"probe another team's cache"], dtype=np.object_))]
    cancel = [_tensor("cancel_request_id", np.array([b"another-teams-request"], dtype=np.object_))]
    models = [("preprocessing", text), ("llm", text)]
    if not triton_pool.config.pools[POOL_ID].engine_in_process:  # the engine is a model of its own
        models.append(("cpu_engine", cancel))
    for model, inputs in models:
        with pytest.raises(InferenceServerException, match="restricted"):
            _infer(triton_pool, model, inputs, headers)
    _infer(triton_pool, "preprocessing", text, triton_pool.headers)  # the gateway's key: served


@pytest.mark.parametrize("headers", WRONG_KEYS, ids=["no key", "wrong key"])
def test_http_inference_without_the_key_is_refused(triton_pool: TritonPool, headers: dict[str, str] | None) -> None:
    body = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["hello"]}]}
    url = f"{triton_pool.http_url}/v2/models/preprocessing/infer"
    refused = httpx.post(url, json=body, headers=headers, timeout=30)
    assert refused.status_code in (401, 403), refused.text
    served = httpx.post(url, json=body, headers=triton_pool.config.triton_http_headers(), timeout=30)
    assert served.status_code == 200, served.text


def test_health_and_metadata_stay_open_for_probes(triton_pool: TritonPool) -> None:
    assert httpx.get(f"{triton_pool.http_url}/v2/health/ready", timeout=5).status_code == 200
    assert httpx.get(f"{triton_pool.http_url}/v2/models/llm", timeout=5).status_code == 200
    client = grpcclient.InferenceServerClient(triton_pool.grpc_url)
    try:
        assert client.is_server_ready() and client.is_model_ready("llm")
    finally:
        client.close()


def test_the_gateway_holds_the_key(live_gateway: LiveGateway) -> None:
    body = {"model": live_gateway.config.pools["tiny"].model_id, "prompt": "The quick brown fox", "max_tokens": 4}
    reply = httpx.post(f"{live_gateway.url}/v1/generate", json=body, headers=live_gateway.headers, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 4
