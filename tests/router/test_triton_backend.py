"""TritonBackend against a stand-in for `tritonclient.grpc.aio.InferenceServerClient`: the
tensors it sends to `llm`, how it reads responses, and that every early end cancels the gRPC
stream. (Against a real Triton server: the end-to-end tests.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import InferInput, InferResult
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor

from contracts.generation import (
    BackendError,
    BackendUnavailable,
    GenerationDelta,
    GenerationRequest,
    RequestRejected,
    Usage,
)
from contracts.token_ids import PackedTokenIds
from router.triton_backend import TritonBackend, build_inputs
from tests.router.llm_responses import response_of

REQUEST = GenerationRequest(request_id="r1", model_id="small", prompt="héllo", max_tokens=5)


def llm_response(
    text: str = "", token_ids: Sequence[int] = (), finish: str = "", completion: int = 0
) -> tuple[InferResult, None]:
    result = InferResult(
        response_of(
            dict(
                text_output=np.array([text.encode()], dtype=np.object_),
                output_token_ids=np.array(token_ids, dtype=np.int32),
                finish_reason=np.array([finish.encode()], dtype=np.object_),
                prompt_tokens=np.array([4], dtype=np.int32),
                cached_tokens=np.array([2], dtype=np.int32),
                completion_tokens=np.array([completion], dtype=np.int32),
            )
        )
    )
    return result, None


class FakeStream:
    """Behaves like grpc.aio's stream after `cancel()`: the next read raises CancelledError."""

    def __init__(self, items: list[Any], hang: bool) -> None:
        self.items = items
        self.hang = hang
        self.cancel_calls = 0
        self._cancelled = asyncio.Event()

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> Any:
        if self._cancelled.is_set():
            raise asyncio.CancelledError
        if not self.items:
            if not self.hang:
                raise StopAsyncIteration
            await self._cancelled.wait()
            raise asyncio.CancelledError
        item = self.items.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> bool:
        self.cancel_calls += 1
        self._cancelled.set()
        return True


class FakeClient:
    def __init__(self, items: list[Any] | None = None, hang: bool = False) -> None:
        self.items = items or []
        self.hang = hang
        self.streams: list[FakeStream] = []
        self.request_iterators: list[AsyncIterator[dict[str, Any]]] = []
        self.headers: list[dict[str, str] | None] = []
        self.server_ready: bool | Exception = True
        self.model_ready = True
        self.closed = False

    def stream_infer(
        self, inputs_iterator: AsyncIterator[dict[str, Any]], headers: dict[str, str] | None = None
    ) -> FakeStream:
        self.request_iterators.append(inputs_iterator)
        self.headers.append(headers)
        self.streams.append(FakeStream(list(self.items), self.hang))
        return self.streams[-1]

    async def is_server_ready(self, client_timeout: float | None = None) -> bool:
        if isinstance(self.server_ready, Exception):
            raise self.server_ready
        return self.server_ready

    async def is_model_ready(self, name: str, client_timeout: float | None = None) -> bool:
        return self.model_ready

    async def close(self) -> None:
        self.closed = True


def make_backend(client: FakeClient) -> TritonBackend:
    return TritonBackend({"small": client}, {"small": "small"}, retry_after_s=3)


async def collect(backend: TritonBackend, request: GenerationRequest = REQUEST) -> list[GenerationDelta]:
    return [delta async for delta in backend.stream_on("small", request)]


def decoded(tensor: InferInput) -> list[Any]:
    content = tensor._get_content()
    dtypes = {"INT32": np.int32, "INT64": np.int64, "FP32": np.float32, "BOOL": np.bool_}
    if tensor.datatype() == "BYTES":
        return [item.decode() for item in deserialize_bytes_tensor(content)]
    values: list[Any] = np.frombuffer(content, dtype=dtypes[tensor.datatype()]).tolist()
    return values


def tensors(inputs: list[InferInput]) -> dict[str, tuple[str, list[int], list[Any]]]:
    return {t.name(): (t.datatype(), t.shape(), decoded(t)) for t in inputs}


def test_inputs_of_a_plain_request() -> None:
    assert tensors(build_inputs(REQUEST)) == {
        "text_input": ("BYTES", [1], ["héllo"]),
        "max_tokens": ("INT32", [1], [5]),
        "stream": ("BOOL", [1], [True]),
        "request_class": ("BYTES", [1], ["interactive"]),
    }


def test_a_tokenized_prompt_goes_as_its_ids_in_place_of_its_text() -> None:
    """The gateway's request carries the ids its context check encoded: `llm` gets those and no
    text, so its server never tokenizes the prompt again."""
    ids = [1, 300, 2**31 - 1, 0]
    tokenized = replace(REQUEST, prompt_token_ids=PackedTokenIds.pack(ids))
    assert tensors(build_inputs(tokenized)) == {
        "input_ids": ("INT32", [4], ids),
        "max_tokens": ("INT32", [1], [5]),
        "stream": ("BOOL", [1], [True]),
        "request_class": ("BYTES", [1], ["interactive"]),
    }
    # A failover's resume sends the same ids again, with the tokens the client already has.
    resumed = tensors(build_inputs(replace(tokenized, resume_token_ids=(7, 8))))
    assert resumed["input_ids"] == ("INT32", [4], ids) and "text_input" not in resumed


def test_inputs_of_a_request_with_every_option() -> None:
    request = GenerationRequest(
        request_id="r2",
        model_id="small",
        prompt="p",
        max_tokens=9,
        stop=("\n", "END"),
        request_class="bulk",
        temperature=0.5,
        top_p=0.75,
        top_k=40,
        seed=2**40,
        ignore_eos=True,
        resume_token_ids=(3, 4),
        cache_namespace="team-a",
    )
    got = tensors(build_inputs(request))
    assert got["stop"] == ("BYTES", [2], ["\n", "END"])
    assert got["request_class"] == ("BYTES", [1], ["bulk"])
    assert got["temperature"] == ("FP32", [1], [0.5])
    assert got["top_p"] == ("FP32", [1], [0.75])
    assert got["top_k"] == ("INT32", [1], [40])
    assert got["seed"] == ("INT64", [1], [2**40])
    assert got["ignore_eos"] == ("BOOL", [1], [True])
    assert got["resume_token_ids"] == ("INT32", [2], [3, 4])
    assert got["cache_namespace"] == ("BYTES", [1], ["team-a"])


async def test_streams_deltas_until_the_finish_reason() -> None:
    client = FakeClient(
        [
            llm_response("Hel", [1, 2], completion=2),
            llm_response("lo", [3], finish="length", completion=3),
            llm_response("never read"),
        ]
    )
    assert await collect(make_backend(client)) == [
        GenerationDelta("Hel", (1, 2), None, Usage(4, 2, 2)),
        GenerationDelta("lo", (3,), "length", Usage(4, 2, 3)),
    ]
    assert client.streams[0].cancel_calls == 0  # ended normally: nothing to cancel
    sent = [item async for item in client.request_iterators[0]]
    assert len(sent) == 1
    assert (sent[0]["model_name"], sent[0]["request_id"]) == ("llm", "r1")
    assert [t.name() for t in sent[0]["inputs"]] == ["text_input", "max_tokens", "stream", "request_class"]


async def test_every_stream_carries_the_inference_headers() -> None:
    """Triton refuses inference without the gateway's key: each call must send it."""
    client = FakeClient([llm_response("a", [1], "length", 1)])
    backend = TritonBackend({"small": client}, {"small": "small"}, headers={"switchyard-inference-key": "k"})
    await collect(backend)
    await collect(backend)
    assert client.headers == [{"switchyard-inference-key": "k"}] * 2


async def test_absent_outputs_read_as_empty() -> None:
    bare = InferResult(response_of({"finish_reason": np.array([b"stop"], dtype=np.object_)}))
    assert await collect(make_backend(FakeClient([(bare, None)]))) == [GenerationDelta(finish_reason="stop")]


async def test_contents_no_llm_sends_are_a_backend_error() -> None:
    mangled = InferResult(response_of({"output_token_ids": np.array([1], dtype=np.int32)}))
    mangled.get_response().raw_output_contents[0] = b"\x01\x00"  # half an INT32
    with pytest.raises(BackendError, match="output_token_ids"):
        await collect(make_backend(FakeClient([(mangled, None)])))


async def test_triton_error_is_a_backend_error() -> None:
    client = FakeClient([llm_response("a", [1]), (None, InferenceServerException("engine failed"))])
    with pytest.raises(BackendError, match="server 'small': engine failed"):
        await collect(make_backend(client))


@pytest.mark.parametrize(
    ("code", "error"),
    [(grpc.StatusCode.UNAVAILABLE, BackendUnavailable), (grpc.StatusCode.INTERNAL, BackendError)],
)
async def test_grpc_failure(code: grpc.StatusCode, error: type[Exception]) -> None:
    rpc_error = grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="boom")
    with pytest.raises(error, match=f"{code.name}: boom") as raised:
        await collect(make_backend(FakeClient([rpc_error])))
    if isinstance(raised.value, BackendUnavailable):
        assert raised.value.retry_after_s == 3


async def test_stream_closed_without_finish_reason_is_an_error() -> None:
    with pytest.raises(BackendError, match="without a finish reason"):
        await collect(make_backend(FakeClient([llm_response("a", [1])])))


async def test_closing_the_iterator_early_cancels_the_stream() -> None:
    client = FakeClient([llm_response("a", [1]), llm_response("b", [2])])
    stream = make_backend(client).stream_on("small", REQUEST)
    assert (await anext(stream)).text == "a"
    await stream.aclose()  # type: ignore[attr-defined]
    assert client.streams[0].cancel_calls == 1


async def test_cancelling_the_reading_task_cancels_the_stream() -> None:
    client = FakeClient([llm_response("a", [1])], hang=True)
    task = asyncio.create_task(collect(make_backend(client)))
    while not client.streams or client.streams[0].items:
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.streams[0].cancel_calls >= 1


async def test_cancel_by_request_id_ends_the_stream_with_cancelled() -> None:
    client = FakeClient([llm_response("a", [1])], hang=True)
    backend = make_backend(client)
    assert await backend.cancel("r1") is False  # not running yet
    task = asyncio.create_task(collect(backend))
    while not client.streams or client.streams[0].items:
        await asyncio.sleep(0)
    assert await backend.cancel("r1") is True
    deltas = await task
    assert deltas[-1] == GenerationDelta(finish_reason="cancelled")
    assert client.streams[0].cancel_calls == 1
    assert await backend.cancel("r1") is False  # forgotten once ended


async def test_readiness_per_pool() -> None:
    ready, not_loaded, down = FakeClient(), FakeClient(), FakeClient()
    not_loaded.model_ready = False
    down.server_ready = InferenceServerException("failed to connect to all addresses")
    backend = TritonBackend({"a": ready, "b": not_loaded, "c": down}, {"a": "small", "b": "small", "c": "large"})
    assert [(p.pool_id, p.ready, p.detail) for p in await backend.readiness()] == [
        ("a", True, ""),
        ("b", False, "model 'llm' not loaded"),
        ("c", False, "failed to connect to all addresses"),
    ]
    await backend.close()
    assert ready.closed and not_loaded.closed and down.closed


async def test_a_refused_input_is_the_callers_not_a_server_failure() -> None:
    refusal = InferenceServerException("invalid input: cpu_engine: top_p must be in (0, 1], got 0.0")
    with pytest.raises(RequestRejected, match=r"^cpu_engine: top_p must be in \(0, 1\], got 0.0$"):
        await collect(make_backend(FakeClient([(None, refusal)])))


async def test_an_invalid_argument_status_is_a_refusal_too() -> None:
    rpc_error = grpc.aio.AioRpcError(
        grpc.StatusCode.INVALID_ARGUMENT, grpc.aio.Metadata(), grpc.aio.Metadata(), details="invalid input: bad stop"
    )
    with pytest.raises(RequestRejected, match=r"^bad stop$"):
        await collect(make_backend(FakeClient([rpc_error])))


@pytest.mark.parametrize(
    "request_",
    [
        replace(REQUEST, top_k=2**40),  # INT32 would wrap it
        replace(REQUEST, temperature=1e300),  # FP32 would make it inf
        replace(REQUEST, prompt="a\ud800b"),  # not UTF-8 encodable
    ],
)
async def test_a_value_its_tensor_cannot_hold_is_refused_before_any_server_sees_it(request_: GenerationRequest) -> None:
    client = FakeClient([llm_response("a", [1], finish="stop")])
    with pytest.raises(RequestRejected, match="llm input"):
        await collect(make_backend(client), request_)
    assert client.streams == []


async def test_a_call_ended_by_its_closed_channel_is_a_failed_server_not_a_cancel() -> None:
    """grpc ends a call whose channel closed (its server left the fleet) with CancelledError in
    the reading task, which nobody cancelled: a server failure to fail over from, not a client's
    cancel (the chaos run's kill-engine-stub: replies ended `cancelled` with 0 tokens, batch
    entries recorded done with an empty text)."""
    client = FakeClient([llm_response("a", [1]), asyncio.CancelledError()])
    task = asyncio.create_task(collect(make_backend(client)))
    with pytest.raises(BackendUnavailable, match="closed mid-reply") as raised:
        await task
    assert raised.value.retry_after_s == 3 and not task.cancelled()
