"""The gRPC front door on the live stack, through unmodified `tritonclient.grpc` and
`tritonclient.grpc.aio`: the replies `/v1/generate` gives, a cancel that frees the server's KV,
keys and shares enforced, a server killed mid-stream resumed token for token, usage counted once;
TensorRT-LLM's guided decoding and log-probability tensors (a JSON-schema reply that validates,
the log-probabilities `/v1/completions` gives), and Triton's `ready: false` for a model it lacks."""

from __future__ import annotations

import asyncio
import json
import math
import queue
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_sync
import tritonclient.grpc.aio as triton_aio
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from bench.live import read_kv_metrics
from config.redis_client import sync_redis_client
from quota.keys import SyncKeyStore
from server_host.process import wait_until
from tests.auth_headers import bearer

from .conftest import LiveGateway, TritonPool
from .test_failover_e2e import (  # noqa: F401 - `fleet` is a fixture
    DRAIN_MAX_TOKENS,
    REFERENCE_STREAMS,
    Fleet,
    _llm_requests,
    fleet,
    kill_while_held,
)

# Six replies this long are still being written when the kill lands, however slow the machine
# was to start them all (950 tokens, the HTTP test's, can all end first on a loaded machine).
MAX_TOKENS = DRAIN_MAX_TOKENS

pytestmark = pytest.mark.integration

PROMPT = "The quick brown fox"
# What the over-share test's first reply asks for: all but 200 of team `e2e-capped`'s
# `max_inflight_tokens` (conftest), and far more than the test takes to make its second call.
CAPPED_HOLD_TOKENS = 7800


def _inputs(
    prompt: str, max_tokens: int, *, seed: int | None = None, ignore_eos: bool = True, **trtllm: Any
) -> list[Any]:
    """Greedy (or seeded sampling), `ignore_eos`: the inputs `llm` documents (docs/tensors.md);
    `trtllm`: TensorRT-LLM's guided decoding and log-probability inputs by name (docs/grpc.md)."""
    values: list[tuple[str, Any, str]] = [
        ("text_input", np.array([prompt.encode()], dtype=np.object_), "BYTES"),
        ("max_tokens", np.array([max_tokens], dtype=np.int32), "INT32"),
        ("ignore_eos", np.array([ignore_eos]), "BOOL"),
    ]
    if seed is not None:
        values += [("temperature", np.array([0.9], np.float32), "FP32"), ("seed", np.array([seed], np.int64), "INT64")]
    for name, value in trtllm.items():
        if isinstance(value, bool):
            values.append((name, np.array([value]), "BOOL"))
        else:
            values.append((name, np.array([value.encode()], dtype=np.object_), "BYTES"))
    inputs = []
    for name, array, datatype in values:
        item = triton_sync.InferInput(name, list(array.shape), datatype)
        item.set_data_from_numpy(array)
        inputs.append(item)
    return inputs


def _is_final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


async def _stream(
    url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    headers: dict[str, str],
    *,
    seed: int | None = None,
    started: threading.Event | None = None,
) -> dict[str, Any]:
    """One request on a tritonclient.grpc.aio stream: its text, token ids and final outputs;
    `started` is set once two tokens are in."""

    async def one() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": model, "inputs": _inputs(prompt, max_tokens, seed=seed)}

    client = triton_aio.InferenceServerClient(url)
    text, token_ids, final = [], [], {}
    try:
        async for result, error in client.stream_infer(one(), headers=headers):
            assert error is None, f"{prompt!r}: {error.message()}"  # the door's words, not the bare repr
            text.append(result.as_numpy("text_output")[0].decode("utf-8", errors="replace"))
            token_ids += result.as_numpy("output_token_ids").tolist()
            if started is not None and len(token_ids) >= 2:
                started.set()
            if _is_final(result):
                final = {n: result.as_numpy(n)[0] for n in ("finish_reason", "completion_tokens", "prompt_tokens")}
                break
    finally:
        await client.close()
    return {"text": "".join(text), "token_ids": token_ids, "final": final}


def _usage(live_gateway: LiveGateway) -> dict[str, int]:
    rows = httpx.get(f"{live_gateway.url}/v1/usage", timeout=10, headers=live_gateway.headers).json()["data"]
    return {k: sum(row[k] for row in rows) for k in ("requests", "completion_tokens")}


def test_replies_equal_http_and_usage_is_counted_once(live_gateway: LiveGateway, triton_pool: TritonPool) -> None:
    model, headers = triton_pool.model_id, bearer(live_gateway.api_key)
    body = {"model": model, "prompt": PROMPT, "max_tokens": 24, "ignore_eos": True}
    http = httpx.post(f"{live_gateway.url}/v1/generate", json=body, timeout=60, headers=live_gateway.headers).json()
    before = _usage(live_gateway)

    client = triton_sync.InferenceServerClient(live_gateway.grpc_url)
    whole = client.infer(model, _inputs(PROMPT, 24), headers=headers)
    client.close()
    streamed = asyncio.run(_stream(live_gateway.grpc_url, model, PROMPT, 24, headers))

    assert whole.as_numpy("text_output")[0].decode() == http["text"] == streamed["text"]
    assert whole.as_numpy("output_token_ids").tolist() == streamed["token_ids"]
    assert int(whole.as_numpy("completion_tokens")[0]) == http["usage"]["completion_tokens"] == 24
    assert streamed["final"]["finish_reason"] == b"length" and int(streamed["final"]["completion_tokens"]) == 24
    deadline = time.monotonic() + 30  # usage is written just after each reply ends
    while (after := _usage(live_gateway))["requests"] < before["requests"] + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert after == {"requests": before["requests"] + 2, "completion_tokens": before["completion_tokens"] + 48}
    metrics = httpx.get(f"{live_gateway.url}/metrics", timeout=10).text
    assert 'switchyard_usage_door_requests_total{door="grpc",model="tiny",team="e2e"}' in metrics


def test_stop_stream_cancel_requests_frees_the_kv(live_gateway: LiveGateway, triton_pool: TritonPool) -> None:
    responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = triton_sync.InferenceServerClient(live_gateway.grpc_url)
    client.start_stream(lambda result, error: responses.put((result, error)), headers=bearer(live_gateway.api_key))
    client.async_stream_infer(triton_pool.model_id, _inputs("cancel me " * 20, 4000), request_id="door-cancel-1")
    _, error = responses.get(timeout=60)
    assert error is None, error
    kv_used = "nv_trt_llm_kv_cache_block_metrics.used"
    assert wait_until(lambda: read_kv_metrics(triton_pool.metrics_url)[kv_used] > 0, 10)
    client.stop_stream(cancel_requests=True)
    client.close()
    assert wait_until(lambda: read_kv_metrics(triton_pool.metrics_url)[kv_used] == 0, 15)
    cancelled = httpx.delete(f"{live_gateway.url}/v1/generate/door-cancel-1", timeout=10, headers=live_gateway.headers)
    assert cancelled.json()["status"] == "cancelled", cancelled.text  # it ended as cancelled, billed so far


def test_a_bad_key_and_over_share(live_gateway: LiveGateway, triton_pool: TritonPool) -> None:
    client = triton_sync.InferenceServerClient(live_gateway.grpc_url)
    with pytest.raises(InferenceServerException) as refused:
        client.infer(triton_pool.model_id, _inputs(PROMPT, 4), headers=bearer("sy-made-up"))
    assert refused.value.status() == "StatusCode.UNAUTHENTICATED"
    client.close()

    with sync_redis_client(live_gateway.config, "admin") as admin:
        capped = bearer(SyncKeyStore(admin, live_gateway.config.teams).create("e2e-capped"))
    # One reply that holds nearly all of the team's tokens in flight until this test cancels it
    # (one that ran to its end could finish before the second call, on a quick or a loaded machine).
    responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
    long = triton_sync.InferenceServerClient(live_gateway.grpc_url)
    long.start_stream(lambda result, error: responses.put((result, error)), headers=capped)
    long.async_stream_infer(triton_pool.model_id, _inputs(PROMPT, CAPPED_HOLD_TOKENS), request_id="door-capped-1")
    _, first_error = responses.get(timeout=60)
    assert first_error is None, first_error
    with grpc.insecure_channel(live_gateway.grpc_url) as channel:  # a raw call, to read the trailer
        request = service_pb2.ModelInferRequest(model_name=triton_pool.model_id)
        for item in _inputs(PROMPT, 200):
            request.inputs.append(item._get_tensor())
            request.raw_input_contents.append(item._get_content())
        with pytest.raises(grpc.RpcError) as over:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, metadata=tuple(capped.items()))
    long.stop_stream(cancel_requests=True)
    long.close()
    finals = [r for r, _ in list(responses.queue) if r is not None and _is_final(r)]
    assert not finals, "the long reply ended before the second call: it no longer held the team's tokens"
    kv_used = "nv_trt_llm_kv_cache_block_metrics.used"  # the cancel reached the engine: the next test starts clean
    assert wait_until(lambda: read_kv_metrics(triton_pool.metrics_url)[kv_used] == 0, 30)
    error: Any = over.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
    assert "retry after" in error.details()
    assert int(dict(error.trailing_metadata())["retry-after"]) >= 1


def test_a_server_killed_mid_stream_resumes_token_for_token(fleet: Fleet, live_gateway: LiveGateway) -> None:  # noqa: F811
    url, headers = live_gateway.grpc_url, bearer(live_gateway.api_key)
    prompts = [f"door failover story {i} about a river" for i in range(6)]
    seeds = [None if i % 2 == 0 else 2000 + i for i in range(6)]
    log = live_gateway.config.var_path / "logs" / "gw.log"

    # Every stream on one event loop: grpc.aio binds each loop to its one process-wide
    # completion queue, and streams on loops of their own in threads (six `asyncio.run`s) lost
    # events to a loop that had closed ("Event loop is closed"), failing a reference run with
    # an empty InferenceServerException (grpc/grpc#25364, #23377).
    async def reference_then_cut() -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        # At most REFERENCE_STREAMS at once: their leases fit one server's 8,192 KV tokens, as
        # admission may count only one until both servers' first load reports are in (six at
        # once met a RESOURCE_EXHAUSTED there).
        reference: list[dict[str, Any]] = []
        for first in range(0, len(prompts), REFERENCE_STREAMS):
            group = zip(
                prompts[first : first + REFERENCE_STREAMS], seeds[first : first + REFERENCE_STREAMS], strict=True
            )
            reference += await asyncio.gather(*(_stream(url, "tiny", p, MAX_TOKENS, headers, seed=s) for p, s in group))
        received = await asyncio.to_thread(
            lambda: {name: _llm_requests(server)[0] for name, server in fleet.servers.items()}
        )
        failovers_before = log.read_text().count("trying another")
        started = [threading.Event() for _ in prompts]
        streams = [
            asyncio.create_task(_stream(url, "tiny", p, MAX_TOKENS, headers, seed=s, started=e))
            for p, s, e in zip(prompts, seeds, started, strict=True)
        ]
        await asyncio.to_thread(kill_while_held, fleet, len(prompts), received, started)
        replies = await asyncio.wait_for(asyncio.gather(*streams), timeout=120)
        return list(reference), list(replies), failovers_before

    reference, replies, failovers_before = asyncio.run(reference_then_cut())
    assert log.read_text().count("trying another") > failovers_before  # replies really were cut
    for index, (got, want) in enumerate(zip(replies, reference, strict=True)):
        assert got["token_ids"] == want["token_ids"], f"reply {index}"
        assert got["final"]["finish_reason"] == b"length"
        assert int(got["final"]["completion_tokens"]) == MAX_TOKENS  # each token counted once


def test_a_model_the_door_lacks_is_not_ready_as_triton_answers(
    live_gateway: LiveGateway, triton_pool: TritonPool
) -> None:
    client = triton_sync.InferenceServerClient(live_gateway.grpc_url)
    headers = bearer(live_gateway.api_key)
    try:
        # The gateway learns its pools' readiness a moment after it starts serving.
        assert wait_until(lambda: client.is_model_ready(triton_pool.model_id, headers=headers), 60)
        assert client.is_model_ready("nope", headers=headers) is False  # Triton's answer; it used to raise
        with pytest.raises(InferenceServerException) as refused:
            client.get_model_metadata("nope", headers=headers)
        assert refused.value.status() == "StatusCode.NOT_FOUND"  # as Triton answers it
    finally:
        client.close()


# The schema of tests/integration/test_structured_outputs_e2e.py: short, and every value checkable.
GUIDE_SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999}, "ok": {"type": "boolean"}},
    "required": ["id", "ok"],
    "additionalProperties": False,
}


def test_a_json_schema_guide_gives_a_reply_that_validates(live_gateway: LiveGateway, triton_pool: TritonPool) -> None:
    client = triton_sync.InferenceServerClient(live_gateway.grpc_url)
    inputs = _inputs(
        PROMPT, 60, ignore_eos=False,
        guided_decoding_guide_type="json_schema", guided_decoding_guide=json.dumps(GUIDE_SCHEMA),
    )  # fmt: skip
    try:
        result = client.infer(triton_pool.model_id, inputs, headers=bearer(live_gateway.api_key))
        with pytest.raises(InferenceServerException) as refused:  # llguidance's reason, before any token
            client.infer(
                triton_pool.model_id,
                _inputs(PROMPT, 5, guided_decoding_guide_type="json_schema", guided_decoding_guide='{"type":"strin"}'),
                headers=bearer(live_gateway.api_key),
            )
    finally:
        client.close()
    assert result.as_numpy("finish_reason")[0] == b"stop"
    value = json.loads(result.as_numpy("text_output")[0].decode())
    assert set(value) == {"id", "ok"} and isinstance(value["ok"], bool)
    assert isinstance(value["id"], int) and 0 <= value["id"] <= 999
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT" and "guided_decoding_guide" in str(refused.value)


def test_return_log_probs_equal_the_completions_routes(live_gateway: LiveGateway, triton_pool: TritonPool) -> None:
    body = {
        "model": triton_pool.model_id, "prompt": PROMPT, "max_tokens": 12, "temperature": 0.0, "logprobs": 0,
        "ignore_eos": True,
    }  # fmt: skip
    http = httpx.post(f"{live_gateway.url}/v1/completions", json=body, timeout=60, headers=live_gateway.headers)
    assert http.status_code == 200, http.text
    want = http.json()["choices"][0]["logprobs"]["token_logprobs"]
    inputs = _inputs(PROMPT, 12, return_log_probs=True)
    temperature = triton_sync.InferInput("temperature", [1], "FP32")
    temperature.set_data_from_numpy(np.array([0.0], np.float32))
    client = triton_sync.InferenceServerClient(live_gateway.grpc_url)
    try:
        whole = client.infer(triton_pool.model_id, [*inputs, temperature], headers=bearer(live_gateway.api_key))
    finally:
        client.close()
    got = whole.as_numpy("output_log_probs")
    assert got.shape == (1, 12) and len(want) == 12  # (beam, token): one per output token id
    # The same up to float rounding: one of the two reads its prompt from the prefix cache.
    assert all(math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5) for a, b in zip(got[0].tolist(), want, strict=True)), (
        got,
        want,
    )
    assert all(value <= 0 for value in want)
    assert math.isclose(float(whole.as_numpy("cum_log_probs")[0]), math.fsum(got[0].tolist()), rel_tol=1e-5)
