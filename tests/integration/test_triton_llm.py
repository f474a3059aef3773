"""`llm` on a real tritonserver, through `tritonclient.grpc.aio` with the inference key (the gateway's path).

One server for the session (conftest.py). The tiny model is random, so its replies are
gibberish but deterministic under greedy decoding: tests compare runs with each other and
with the tokenizer, never with fixed text.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import np_to_triton_dtype

from bls.tokenizer import PromptTokenizer
from contracts.engine_metrics import parse_kv_cache

if TYPE_CHECKING:  # conftest modules are not importable under --import-mode=importlib
    from conftest import TritonPool

pytestmark = pytest.mark.integration

PROMPT = "The quick brown fox"


def _tensor(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


def llm_inputs(prompt: str | Sequence[int], max_tokens: int, **options: object) -> list[grpcclient.InferInput]:
    """`llm`'s inputs; a prompt given as token ids goes as `input_ids` (the gateway's way)."""
    inputs = [
        _tensor("text_input", np.array([prompt.encode()], dtype=np.object_))
        if isinstance(prompt, str)
        else _tensor("input_ids", np.array(prompt, dtype=np.int32)),
        _tensor("max_tokens", np.array([max_tokens], dtype=np.int32)),
    ]
    for name, value in options.items():
        if name == "stop":
            array = np.array([s.encode() for s in value], dtype=np.object_)  # type: ignore[attr-defined]
        elif isinstance(value, bool):
            array = np.array([value])
        elif isinstance(value, str):
            array = np.array([value.encode()], dtype=np.object_)
        elif name == "resume_token_ids":
            array = np.array(value, dtype=np.int32)
        else:
            array = np.array([value], dtype=np.int32)
        inputs.append(_tensor(name, array))
    return inputs


@dataclass
class Reply:
    texts: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    finals: list[bool] = field(default_factory=list)
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.texts)


async def _one(inputs: list[grpcclient.InferInput], request_id: str) -> AsyncIterator[dict[str, object]]:
    yield {
        "model_name": "llm",
        "inputs": inputs,
        "request_id": request_id,
        "enable_empty_final_response": True,
    }


async def generate(
    pool: TritonPool,
    inputs: list[grpcclient.InferInput],
    request_id: str = "",
    cancel_after: int | None = None,
) -> Reply:
    """Stream one request; with `cancel_after`, cancel the stream after that many responses."""
    reply = Reply()
    client = grpcclient.InferenceServerClient(pool.grpc_url)
    try:
        stream = client.stream_infer(_one(inputs, request_id), headers=pool.headers)
        async for result, error in stream:
            if error is not None:
                reply.error = str(error)
                break
            final = bool(result.get_response().parameters["triton_final_response"].bool_param)
            reply.finals.append(final)
            if result.as_numpy("text_output") is not None:
                reply.texts.append(result.as_numpy("text_output")[0].decode())
                reply.token_ids.extend(int(i) for i in result.as_numpy("output_token_ids"))
                reply.finish_reason = result.as_numpy("finish_reason")[0].decode()
                reply.prompt_tokens = int(result.as_numpy("prompt_tokens")[0])
                reply.completion_tokens = int(result.as_numpy("completion_tokens")[0])
            if final:
                break
            if cancel_after is not None and len(reply.finals) >= cancel_after:
                stream.cancel()
                break
    finally:
        await client.close()
    return reply


def run(coro: object, timeout: float = 30.0) -> Reply:
    return asyncio.run(asyncio.wait_for(coro, timeout))  # type: ignore[arg-type]


def engine_gauges(pool: TritonPool) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(pool.metrics_url, timeout=5) as response:
        text = response.read().decode()
    gauges = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            label = sample.labels.get("kv_cache_block_type") or sample.labels.get("request_type")
            if sample.name.startswith("nv_trt_llm_") and label:
                gauges[(sample.name, label)] = sample.value
    return gauges


@pytest.fixture(scope="module")
def tokenizer(triton_pool: TritonPool) -> PromptTokenizer:
    return PromptTokenizer.from_model_dir(triton_pool.model_dir)


def test_stream_deltas_concatenate_to_the_whole_reply(triton_pool: TritonPool, tokenizer: PromptTokenizer) -> None:
    reply = run(generate(triton_pool, llm_inputs(PROMPT, 40, ignore_eos=True), request_id="stream-1"))
    assert reply.error is None
    assert reply.finals[-1] and not any(reply.finals[:-1])
    assert reply.finish_reason == "length"
    assert len(reply.token_ids) == reply.completion_tokens == 40
    assert reply.prompt_tokens == len(tokenizer.encode_prompt(PROMPT))
    assert reply.text == tokenizer.decode(reply.token_ids)
    assert len(reply.texts) > 1  # it really streamed


def test_stream_false_is_one_response_with_the_same_reply(triton_pool: TritonPool) -> None:
    streamed = run(generate(triton_pool, llm_inputs(PROMPT, 30, ignore_eos=True)))
    whole = run(generate(triton_pool, llm_inputs(PROMPT, 30, ignore_eos=True, stream=False)))
    assert whole.error is None
    assert whole.finals == [True]
    assert (whole.text, whole.token_ids) == (streamed.text, streamed.token_ids)


def preprocessing_runs(pool: TritonPool) -> int:
    """How many requests the `preprocessing` model has executed (Triton's statistics)."""
    import tritonclient.grpc as grpc_sync

    client = grpc_sync.InferenceServerClient(pool.grpc_url)
    try:
        stats = client.get_inference_statistics("preprocessing", headers=pool.headers)
    finally:
        client.close()
    return int(stats.model_stats[0].inference_stats.success.count)


def test_a_prompt_sent_as_its_ids_gets_the_same_reply_without_preprocessing(
    triton_pool: TritonPool, tokenizer: PromptTokenizer
) -> None:
    """The gateway's path: the ids it encoded for its context check, in the text's place. The
    reply (text, token ids, usage), a stop string's cut and a failover's resume are the text's."""
    ids = tokenizer.encode_prompt(PROMPT)
    before = preprocessing_runs(triton_pool)
    by_text = run(generate(triton_pool, llm_inputs(PROMPT, 40, ignore_eos=True)))
    assert preprocessing_runs(triton_pool) == before + 1
    by_ids = run(generate(triton_pool, llm_inputs(ids, 40, ignore_eos=True)))
    assert preprocessing_runs(triton_pool) == before + 1  # no BLS call to `preprocessing`
    assert by_ids.error is None and by_text.error is None
    reply = (by_ids.text, by_ids.token_ids, by_ids.finish_reason, by_ids.prompt_tokens, by_ids.completion_tokens)
    assert reply == (by_text.text, by_text.token_ids, "length", len(ids), 40)

    start = next(i for i in range(5, 30) if by_text.text[i : i + 2].isascii() and by_text.text[i : i + 2].isprintable())
    stop = [by_text.text[start : start + 2]]
    cut_text, cut_ids = (
        run(generate(triton_pool, llm_inputs(p, 40, ignore_eos=True, stop=stop))) for p in (PROMPT, ids)
    )
    assert cut_ids.finish_reason == "stop" and (cut_ids.text, cut_ids.token_ids) == (cut_text.text, cut_text.token_ids)

    resumed = run(generate(triton_pool, llm_inputs(ids, 40, ignore_eos=True, resume_token_ids=by_text.token_ids[:10])))
    assert resumed.error is None and resumed.token_ids == by_text.token_ids[10:]
    assert by_text.text.endswith(resumed.text) and resumed.text


def test_concurrent_streams_do_not_disturb_each_other(triton_pool: TritonPool) -> None:
    alone = run(generate(triton_pool, llm_inputs(PROMPT, 30, ignore_eos=True)))

    async def many() -> list[Reply]:
        return await asyncio.gather(*(generate(triton_pool, llm_inputs(PROMPT, 30, ignore_eos=True)) for _ in range(6)))

    replies = asyncio.run(asyncio.wait_for(many(), 60))
    assert all((r.error, r.text, r.token_ids) == (None, alone.text, alone.token_ids) for r in replies)


def test_stop_string_cuts_the_reply(triton_pool: TritonPool) -> None:
    max_tokens = 2000
    full = run(generate(triton_pool, llm_inputs(PROMPT, max_tokens, ignore_eos=True, stream=False)))
    # A stop string taken from the middle of the greedy reply: plain ASCII, two characters.
    start = next(i for i in range(5, 200) if full.text[i : i + 2].isascii() and full.text[i : i + 2].isprintable())
    stop = full.text[start : start + 2]
    cut = full.text.index(stop)
    reply = run(generate(triton_pool, llm_inputs(PROMPT, max_tokens, ignore_eos=True, stop=[stop])))
    assert reply.error is None
    assert reply.finish_reason == "stop"
    assert reply.text == full.text[:cut]
    # The engine is stopped behind the cut (a reply far longer than one stream interval).
    assert reply.completion_tokens < max_tokens


def test_resume_continues_the_same_reply(triton_pool: TritonPool) -> None:
    full = run(generate(triton_pool, llm_inputs(PROMPT, 30, ignore_eos=True)))
    resumed = run(generate(triton_pool, llm_inputs(PROMPT, 30, ignore_eos=True, resume_token_ids=full.token_ids[:10])))
    assert resumed.error is None
    assert resumed.token_ids == full.token_ids[10:]
    assert resumed.completion_tokens == 20
    assert resumed.text and full.text.endswith(resumed.text)


def test_client_cancel_frees_the_engine(triton_pool: TritonPool) -> None:
    # 7,000 tokens take seconds to write; a cancelled stream must be gone well before that.
    reply = run(generate(triton_pool, llm_inputs(PROMPT, 7000, ignore_eos=True), cancel_after=5))
    assert len(reply.finals) == 5 and not any(reply.finals)
    cancelled_at = time.monotonic()
    deadline = cancelled_at + 5.0
    gauges = engine_gauges(triton_pool)
    while time.monotonic() < deadline:
        gauges = engine_gauges(triton_pool)
        kv = "nv_trt_llm_kv_cache_block_metrics"
        if gauges[("nv_trt_llm_request_metrics", "active")] == 0 and gauges[(kv, "free")] == gauges[(kv, "max")]:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"engine still busy 5 s after the client cancelled: {gauges}")
    assert time.monotonic() - cancelled_at < 1.5


def test_streams_cancelled_at_once_leave_no_engine_work(triton_pool: TritonPool) -> None:
    """More streams than the engine runs at once, all cancelled before their first token.

    Regression: with `async_exec`, requests queued in the engine held the stub's few default
    threads, so the cancels that would have freed the engine never left `llm`, and the next
    request waited behind the abandoned ones for good.
    """

    async def abandon(count: int) -> None:
        async def one() -> None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(generate(triton_pool, llm_inputs(PROMPT, 3000, ignore_eos=True)), 0.03)

        await asyncio.gather(*(one() for _ in range(count)))

    asyncio.run(abandon(24))
    time.sleep(0.5)  # let the abandoned requests reach the engine, if they are going to
    started = time.monotonic()
    after = run(generate(triton_pool, llm_inputs(PROMPT, 10, ignore_eos=True)), timeout=10)
    assert after.error is None and after.completion_tokens == 10
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        gauges = engine_gauges(triton_pool)
        if gauges[("nv_trt_llm_request_metrics", "active")] == 0 == gauges[("nv_trt_llm_request_metrics", "waiting")]:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"abandoned requests still in the engine: {gauges}")


def test_engine_metrics_are_exported(triton_pool: TritonPool) -> None:
    gauges = engine_gauges(triton_pool)
    kv = {label for name, label in gauges if name == "nv_trt_llm_kv_cache_block_metrics"}
    requests = {label for name, label in gauges if name == "nv_trt_llm_request_metrics"}
    assert kv == {"max", "free", "used", "tokens_per", "reused"}
    assert requests == {"active", "max", "scheduled", "context", "waiting"}
    assert gauges[("nv_trt_llm_kv_cache_block_metrics", "tokens_per")] == 16
    assert gauges[("nv_trt_llm_kv_cache_block_metrics", "max")] == 8192 // 16
    assert gauges[("nv_trt_llm_request_metrics", "max")] == 16


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (llm_inputs(PROMPT, 0), "max_tokens must be at least 1"),
        (llm_inputs(PROMPT, 5, request_class="urgent"), "request_class must be one of"),
        (llm_inputs(PROMPT, 5, top_p=0), "top_p"),
        (llm_inputs(PROMPT, 3, resume_token_ids=[5, 6, 7]), "nothing to generate"),  # the engine refuses
        ([_tensor("text_input", np.array([b"hi"], dtype=np.object_))], "max_tokens"),  # Triton itself refuses
        (llm_inputs([1, 5, 10**6], 5), "invalid input: input_ids holds ids outside the vocabulary [0, 512): [1000000]"),
        (llm_inputs([1, -3], 5), "invalid input: input_ids holds ids outside the vocabulary [0, 512): [-3]"),
        (llm_inputs(PROMPT, 5)[1:], "exactly one of 'text_input' (text) and 'input_ids' (its token ids), got neither"),
        (llm_inputs(PROMPT, 5) + llm_inputs([1, 5], 5)[:1], "got both"),
    ],
)
def test_bad_input_is_an_error_not_a_hang(
    triton_pool: TritonPool, inputs: list[grpcclient.InferInput], message: str
) -> None:
    reply = run(generate(triton_pool, inputs), timeout=15)
    assert reply.error is not None and message in reply.error


def test_pre_and_postprocessing_models_serve_power_users_directly(
    triton_pool: TritonPool, tokenizer: PromptTokenizer
) -> None:
    """`llm` detokenizes in process by default; the stage models stay callable on their own
    and agree with the tokenizer."""
    import tritonclient.grpc as grpc_sync

    client = grpc_sync.InferenceServerClient(triton_pool.grpc_url)
    text = "héllo wörld, 中文 tokens"
    text_input = _tensor("text_input", np.array([text.encode()], dtype=np.object_))
    pre = client.infer("preprocessing", [text_input], headers=triton_pool.headers)
    ids = pre.as_numpy("input_ids")
    assert ids is not None and list(ids) == tokenizer.encode_prompt(text)

    completion = np.array(ids[1:], dtype=np.int32)  # as if the engine had written them
    post = client.infer(
        "postprocessing",
        [
            _tensor("token_ids", completion),
            _tensor("prefix_offset", np.array([0], dtype=np.int32)),
            _tensor("read_offset", np.array([0], dtype=np.int32)),
            _tensor("held_text", np.array([b""], dtype=np.object_)),
            _tensor("is_final", np.array([True])),
        ],
        headers=triton_pool.headers,
    )
    out = post.as_numpy("text_output")
    assert out is not None and out[0].decode() == text
    client.close()


def test_the_engine_reports_the_kv_bulk_holds(triton_pool: TritonPool) -> None:
    """What the router may count as room for a person's request on this engine: the blocks a
    running bulk reply holds, and none once it has gone."""

    def bulk_tokens() -> int:
        with urllib.request.urlopen(triton_pool.metrics_url, timeout=5) as response:
            return parse_kv_cache(response.read().decode()).bulk_tokens

    async def until(check: Callable[[int], bool], timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while not check(held := await asyncio.to_thread(bulk_tokens)):
            assert time.monotonic() < deadline, f"bulk KV still {held} tokens after {timeout_s} s"
            await asyncio.sleep(0.05)
        return held

    async def scenario() -> None:
        bulk = llm_inputs(PROMPT, 3000, ignore_eos=True, request_class="bulk")
        running = asyncio.create_task(generate(triton_pool, bulk))
        try:
            await until(lambda tokens: tokens > 0, 10)
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        await until(lambda tokens: tokens == 0, 10)

    asyncio.run(scenario())
