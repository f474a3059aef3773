"""End to end: a real gateway process in front of the real Triton server of `triton_pool`.

What a team sees: streamed and whole replies, cancellation by DELETE and by closing the stream
(the server's KV comes back), clear errors for bad input, models and readiness.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tritonclient_grpc
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import np_to_triton_dtype

from bench.live import read_kv_metrics
from server_host.process import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture()
def gateway_url(live_gateway) -> str:  # type: ignore[no-untyped-def]
    return str(live_gateway.url)


@pytest.fixture()
def auth(live_gateway) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return dict(live_gateway.headers)


def _sse_events(response: httpx.Response) -> Iterator[tuple[str, object]]:
    event = "message"
    for line in response.iter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
            yield event, (data if data == "[DONE]" else json.loads(data))
            event = "message"


def _kv_used(metrics_url: str) -> float:
    return read_kv_metrics(metrics_url)["nv_trt_llm_kv_cache_block_metrics.used"]


def test_stream_and_whole_reply_agree(gateway_url: str, auth: dict[str, str], triton_pool) -> None:  # type: ignore[no-untyped-def]
    body = {
        "model": triton_pool.model_id,
        "prompt": "The quick brown fox",
        "max_tokens": 24,
        "ignore_eos": True,
    }
    whole = httpx.post(f"{gateway_url}/v1/generate", json=body, timeout=60, headers=auth)
    assert whole.status_code == 200, whole.text
    reply = whole.json()
    assert reply["usage"]["completion_tokens"] == 24
    assert reply["stop_reason"] == "length"

    deltas: list[str] = []
    final: dict[str, object] = {}
    with httpx.stream(
        "POST", f"{gateway_url}/v1/generate", json={**body, "stream": True}, timeout=60, headers=auth
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(_sse_events(response))
    assert events[-1] == ("message", "[DONE]")
    for event, payload in events[:-1]:
        assert event == "message" and isinstance(payload, dict)
        if payload.get("stop_reason") is not None:
            final = payload
        else:
            deltas.append(str(payload["text"]))
    # Greedy: the stream concatenates to exactly the whole reply.
    assert "".join(deltas) == reply["text"]
    assert final["usage"] == reply["usage"]


def _preprocessing_runs(triton_pool) -> int:  # type: ignore[no-untyped-def]
    """How many requests the server's `preprocessing` model has executed (Triton's statistics)."""
    client = tritonclient_grpc.InferenceServerClient(triton_pool.grpc_url)
    try:
        stats = client.get_inference_statistics("preprocessing", headers=triton_pool.headers)
    finally:
        client.close()
    return int(stats.model_stats[0].inference_stats.success.count)


def _text_reply_from_llm(triton_pool, prompt: str, max_tokens: int) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    """`llm`'s whole reply (text, prompt tokens) to `prompt` sent to Triton as text, greedily."""
    tensors = {
        "text_input": np.array([prompt.encode()], dtype=np.object_),
        "max_tokens": np.array([max_tokens], dtype=np.int32),
        "ignore_eos": np.array([True]),
        "stream": np.array([False]),
    }
    inputs = []
    for name, array in tensors.items():
        tensor = tritonclient_grpc.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    results: queue.Queue[tuple[object, object]] = queue.Queue()
    client = tritonclient_grpc.InferenceServerClient(triton_pool.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)), headers=triton_pool.headers)
    try:
        client.async_stream_infer("llm", inputs)
        result, error = results.get(timeout=60)
    finally:
        client.stop_stream()
        client.close()
    assert error is None, error
    return result.as_numpy("text_output")[0].decode(), int(result.as_numpy("prompt_tokens")[0])  # type: ignore[attr-defined]


def test_the_gateway_sends_its_token_ids_and_gets_the_texts_reply(
    gateway_url: str, auth: dict[str, str], triton_pool
) -> None:  # type: ignore[no-untyped-def]
    """The gateway tokenizes a prompt once, for its context check, and sends the ids: the server's
    `preprocessing` never runs for it, and the reply is the one `llm` gives the prompt as text."""
    prompt = "Héllo wörld </s><s>[INST] 中文 🚀 the quick brown fox. " * 40
    body = {"model": triton_pool.model_id, "prompt": prompt, "max_tokens": 24, "ignore_eos": True}
    before = _preprocessing_runs(triton_pool)
    via_gateway = httpx.post(f"{gateway_url}/v1/generate", json=body, timeout=60, headers=auth)
    assert via_gateway.status_code == 200, via_gateway.text
    assert _preprocessing_runs(triton_pool) == before
    text, prompt_tokens = _text_reply_from_llm(triton_pool, prompt, 24)
    assert _preprocessing_runs(triton_pool) == before + 1
    reply = via_gateway.json()
    assert reply["text"] == text and reply["usage"]["prompt_tokens"] == prompt_tokens > 500


def test_delete_cancels_and_frees_kv(gateway_url: str, auth: dict[str, str], triton_pool) -> None:  # type: ignore[no-untyped-def]
    body = {
        "model": triton_pool.model_id,
        "prompt": "cancel me " * 20,
        "max_tokens": 4000,
        "ignore_eos": True,
        "stream": True,
        "request_id": "e2e-cancel-1",
    }
    with httpx.stream("POST", f"{gateway_url}/v1/generate", json=body, timeout=60, headers=auth) as response:
        events = _sse_events(response)
        next(events)  # the first delta: it is running and holds KV (the gauge may trail it)
        assert wait_until(lambda: _kv_used(triton_pool.metrics_url) > 0, 10)
        cancelled = httpx.delete(f"{gateway_url}/v1/generate/e2e-cancel-1", timeout=10, headers=auth)
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
        assert cancelled.json()["usage"]["completion_tokens"] >= 1
        rest = list(events)
    finals = [p for _, p in rest if isinstance(p, dict) and p.get("stop_reason")]
    assert finals and finals[-1]["stop_reason"] == "cancelled"
    assert wait_until(lambda: _kv_used(triton_pool.metrics_url) == 0, 10)
    # DELETE is idempotent: the ended request reports how it ended; an unknown id is 404.
    again = httpx.delete(f"{gateway_url}/v1/generate/e2e-cancel-1", timeout=10, headers=auth)
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    assert httpx.delete(f"{gateway_url}/v1/generate/e2e-never-sent", timeout=10, headers=auth).status_code == 404


def test_closed_stream_cancels_on_the_server(gateway_url: str, auth: dict[str, str], triton_pool) -> None:  # type: ignore[no-untyped-def]
    body = {
        "model": triton_pool.model_id,
        "prompt": "walk away " * 20,
        "max_tokens": 4000,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", f"{gateway_url}/v1/generate", json=body, timeout=60, headers=auth) as response:
        next(_sse_events(response))
        # The gauge is the engine's last report: on a loaded machine it can trail the first token.
        assert wait_until(lambda: _kv_used(triton_pool.metrics_url) > 0, 10)
    # The client went away mid-reply: the engine drops the request and frees its blocks.
    assert wait_until(lambda: _kv_used(triton_pool.metrics_url) == 0, 15)


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"prompt": "hi", "max_tokens": 5}, 400, "model"),
        ({"model": "tiny", "prompt": "hi"}, 400, "max_tokens"),
        ({"model": "tiny", "prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
        ({"model": "tiny", "prompt": "", "max_tokens": 5}, 400, "prompt"),
        ({"model": "tiny", "prompt": "hi", "max_tokens": "5"}, 400, "max_tokens"),
        ({"model": "nope", "prompt": "hi", "max_tokens": 5}, 404, "nope"),
        ({"model": "tiny", "prompt": "hi", "max_tokens": 9000}, 400, "8192"),
    ],
)
def test_bad_input_gets_a_clear_error(
    gateway_url: str, auth: dict[str, str], body: dict[str, object], status: int, needle: str
) -> None:
    response = httpx.post(f"{gateway_url}/v1/generate", json=body, timeout=10, headers=auth)
    assert response.status_code == status, response.text
    assert needle in response.json()["error"]["message"]


def test_models_health_and_readiness(gateway_url: str, auth: dict[str, str], triton_pool) -> None:  # type: ignore[no-untyped-def]
    models = httpx.get(f"{gateway_url}/v1/models", timeout=10, headers=auth).json()
    assert [m["id"] for m in models["data"]] == [triton_pool.model_id]
    assert httpx.get(f"{gateway_url}/healthz", timeout=10).status_code == 200
    assert httpx.get(f"{gateway_url}/readyz", timeout=10).json()["status"] == "ready"
    metrics = httpx.get(f"{gateway_url}/metrics", timeout=10).text
    assert "switchyard" in metrics


def test_the_router_counts_its_choices(gateway_url: str, auth: dict[str, str], triton_pool) -> None:  # type: ignore[no-untyped-def]
    """`switchyard_gateway_routed_total{pool, reason}`. Each of the gateway's two workers counts
    its own and a scrape reaches one of them, so requests go until a scrape shows one counted."""

    def routed() -> dict[str, float]:
        text = httpx.get(f"{gateway_url}/metrics", timeout=10).text
        return {
            sample.labels["reason"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "switchyard_gateway_routed_total" and sample.labels["pool"] == triton_pool.pool_id
        }

    body = {"model": triton_pool.model_id, "prompt": "count me", "max_tokens": 3}
    counted: dict[str, float] = {}
    for _ in range(20):
        assert httpx.post(f"{gateway_url}/v1/generate", json=body, timeout=60, headers=auth).status_code == 200
        if counted := routed():
            break
    assert sum(counted.values()) >= 1
    assert set(counted) <= {"prefix", "spill", "least-loaded", "no-room", "home", "displace"}


def test_short_reply_is_not_stuck_behind_long_ones(gateway_url: str, auth: dict[str, str], triton_pool) -> None:  # type: ignore[no-untyped-def]
    """S1 in small: a 10-token reply finishes while long replies keep decoding."""
    long_body = {
        "model": triton_pool.model_id,
        "prompt": "a long report",
        # Admission reserves prompt + max_tokens: four of these fit the tiny pool's 8,192 tokens.
        "max_tokens": 1500,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.Client(timeout=60, headers=auth) as client:
        streams = [client.stream("POST", f"{gateway_url}/v1/generate", json=long_body) for _ in range(4)]
        responses = [s.__enter__() for s in streams]
        try:
            for r in responses:
                next(_sse_events(r))
            started = time.perf_counter()
            short = client.post(
                f"{gateway_url}/v1/generate",
                json={"model": triton_pool.model_id, "prompt": "quick", "max_tokens": 10, "ignore_eos": True},
            )
            elapsed = time.perf_counter() - started
        finally:
            for s in streams:
                s.__exit__(None, None, None)
    assert short.status_code == 200
    assert short.json()["usage"]["completion_tokens"] == 10
    assert elapsed < 10  # the long replies need minutes: static batching would wait for them


def test_no_key_is_401_and_a_repeat_never_generates_twice(gateway_url: str, auth: dict[str, str], triton_pool) -> None:  # type: ignore[no-untyped-def]
    body = {"model": triton_pool.model_id, "prompt": "once only", "max_tokens": 8, "ignore_eos": True,
            "request_id": "e2e-once"}  # fmt: skip
    missing = httpx.post(f"{gateway_url}/v1/generate", json=body, timeout=10)
    assert missing.status_code == 401 and "Bearer" in missing.json()["error"]["message"]

    first = httpx.post(f"{gateway_url}/v1/generate", json=body, timeout=60, headers=auth).json()
    again = httpx.post(f"{gateway_url}/v1/generate", json=body, timeout=60, headers=auth).json()
    assert again == first  # the stored result, not a second generation
    clash = httpx.post(f"{gateway_url}/v1/generate", json={**body, "max_tokens": 9}, timeout=10, headers=auth)
    assert clash.status_code == 409

    usage = httpx.get(f"{gateway_url}/v1/usage", timeout=10, headers=auth).json()
    assert sum(row["completion_tokens"] for row in usage["data"]) >= 8
