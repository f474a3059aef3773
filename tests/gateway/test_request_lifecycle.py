"""RequestLifecycle on the real app (fake backend, real Redis): the bill is what reached the
caller. A stream that fails after some text bills that text; a whole reply that fails reached
no one, so its tokens are metered as discarded and not billed (found by the partitions bench:
a 502 after 22 generated tokens billed all 22); a reply its grammar gave up on is no product,
streamed or not: discarded, and its id replays the same 400."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any, cast

import httpx
import redis
from fastapi import FastAPI

from contracts.generation import BackendError, GenerationDelta, GenerationRequest, Logprobs
from serving.request_lifecycle import RequestLifecycle
from serving.requests_registry import InflightRequest

from .conftest import FakeBackend

BODY = {"model": "small", "prompt": "the quick brown fox", "max_tokens": 3}


async def _billed(client: httpx.AsyncClient, app: FastAPI) -> tuple[int, int, int]:
    """Requests, completion tokens and discarded tokens on team alpha's bill so far."""
    await app.state.services.registry.settled()  # every ended request's usage written
    rows = (await client.get("/v1/usage")).raise_for_status().json()["data"]
    return tuple(sum(row[key] for row in rows) for key in ("requests", "completion_tokens", "discarded_tokens"))


async def test_a_whole_reply_that_fails_after_text_bills_no_completion(
    client: httpx.AsyncClient, app: FastAPI, backend: FakeBackend
) -> None:
    backend.error_after = 2  # "Hello" (2 tokens) and ", " (1) generated, then the server fails
    backend.error = BackendError("server 'x': UNAVAILABLE: Stream removed")
    for path, body in (("/v1/generate", BODY), ("/v1/completions", BODY)):
        reply = await client.post(path, json=body)
        assert reply.status_code == 502, reply.text
    assert await _billed(client, app) == (2, 0, 6)  # the 3 generated tokens of each: discarded


async def test_a_stream_that_fails_after_text_bills_the_text_it_sent(
    client: httpx.AsyncClient, app: FastAPI, backend: FakeBackend, sse: Any
) -> None:
    backend.error_after = 2
    backend.error = BackendError("server 'x': UNAVAILABLE: Stream removed")
    for path in ("/v1/generate", "/v1/completions"):
        events = sse((await client.post(path, json={**BODY, "stream": True})).text)
        assert events[-1][0] == "error"
    assert await _billed(client, app) == (2, 6, 0)


async def test_a_reply_its_grammar_gave_up_on_bills_nothing_and_replays_its_error(
    client: httpx.AsyncClient, app: FastAPI, backend: FakeBackend, sse: Any
) -> None:
    backend.deltas = [*backend.deltas[:2], GenerationDelta(text="wor", token_ids=(8,), finish_reason="grammar_failed")]
    body = {**BODY, "request_id": "r-grammar"}
    whole = await client.post("/v1/generate", json=body)
    assert whole.status_code == 400 and whole.json()["error"]["code"] == "grammar_failed", whole.text
    events = sse((await client.post("/v1/completions", json={**BODY, "stream": True})).text)
    assert events[0][1]["choices"][0]["text"] == "Hello" and events[-1][0] == "error"
    assert await _billed(client, app) == (2, 0, 8)  # 4 tokens each, streamed or not: discarded
    again = await client.post("/v1/generate", json=body)  # the stored end: not resumed, not generated
    assert again.status_code == 400 and again.json()["error"] == whole.json()["error"]
    assert len(backend.requests) == 2


async def test_a_whole_reply_that_ends_well_bills_its_completion(client: httpx.AsyncClient, app: FastAPI) -> None:
    assert (await client.post("/v1/generate", json=BODY)).status_code == 200
    assert await _billed(client, app) == (1, 4, 0)


async def test_a_retry_of_an_id_that_failed_after_text_resumes_it_and_bills_the_rest(
    client: httpx.AsyncClient, app: FastAPI, backend: FakeBackend, sse: Any
) -> None:
    """The partitions bench: a stream failed after its first token with no server left to move
    to, and every retry with its id replayed the 502. Now the retry resumes the generation: the
    engine gets the tokens the reply has (`resume_token_ids`), the reply is whole, the id names
    one generation, and the bill counts each token once."""
    backend.error_after = 2
    backend.error = BackendError("server 'x': UNAVAILABLE: Stream removed")
    body = {**BODY, "request_id": "r-resume"}
    events = sse((await client.post("/v1/generate", json={**body, "stream": True})).text)
    assert [event for event, _ in events] == [None, None, "error"]  # "Hello", ", ", then the failure
    backend.error_after = None
    retry = await client.post("/v1/generate", json=body)
    assert retry.status_code == 200, retry.text
    assert (retry.json()["text"], retry.json()["usage"]["completion_tokens"]) == ("Hello, world", 4)
    assert [r.resume_token_ids for r in backend.requests] == [(), (5, 6, 7)]
    assert await _billed(client, app) == (2, 4, 0)  # 3 streamed by the first, 1 more by the retry

    again = await client.post("/v1/generate", json=body)  # done now: replayed, not generated
    assert again.json()["text"] == "Hello, world" and len(backend.requests) == 2


async def test_a_whole_reply_that_failed_then_resumed_bills_every_token_once(
    client: httpx.AsyncClient, app: FastAPI, backend: FakeBackend
) -> None:
    backend.error_after = 2
    body = {**BODY, "request_id": "r-whole"}
    assert (await client.post("/v1/generate", json=body)).status_code == 502  # 3 tokens, reached no one
    backend.error_after = None
    retry = await client.post("/v1/generate", json={**body, "stream": True})
    assert retry.status_code == 200 and '"text":"world"' in retry.text  # after the stored "Hello", ", "
    assert await _billed(client, app) == (2, 4, 3)  # the first's 3 discarded, the resumed reply's 4 billed


async def test_a_mirror_write_that_fails_stops_the_mirror_quietly() -> None:
    """Found by the partitions bench ("Task exception was never retrieved"): a Redis timeout
    while mirroring to followers escaped the mirror's task. It stops instead (sent again, a
    batch might land twice); the followers get the rest from the final entry."""

    class FailingStore:
        calls = 0

        async def mirror(self, *_: Any) -> None:
            self.calls += 1
            raise redis.TimeoutError("Timeout reading from 10.0.0.1:6379")

    store = FailingStore()
    lifecycle = RequestLifecycle(
        cast(Any, store), cast(Any, None), cast(Any, None), "t", "r", "interactive", cast(Any, None), keep_s=None
    )
    entry = InflightRequest(GenerationRequest("t/r", "small", "the fox", 8), 3, 0.0, "r")
    entry.apply(GenerationDelta("Hel", (1,)), 0.1)
    lifecycle.followed(entry, mirror=True)
    mirror = lifecycle._mirror
    assert mirror is not None
    await asyncio.wait_for(asyncio.shield(mirror), 5)
    assert mirror.exception() is None and store.calls == 1
    entry.apply(GenerationDelta("lo", (2,)), 0.2)  # nothing more is mirrored
    await asyncio.sleep(0)
    assert store.calls == 1


def _scored(delta: GenerationDelta, first: float) -> GenerationDelta:
    """`delta` with a log-probability per token (and one alternative each: itself)."""
    values = tuple(first - i for i in range(len(delta.token_ids)))
    return replace(delta, logprobs=Logprobs(values, delta.token_ids, values))


async def test_a_resumed_reply_keeps_the_log_probabilities_of_the_tokens_it_carries(
    client: httpx.AsyncClient, app: FastAPI, backend: FakeBackend, sse: Any
) -> None:
    """The log-probabilities the failed generation's server sent are the resumed reply's too:
    one per token, as an uninterrupted reply has them."""
    backend.deltas = [_scored(delta, -0.25 * (i + 1)) for i, delta in enumerate(backend.deltas)]
    backend.error_after = 2
    backend.error = BackendError("server 'x': UNAVAILABLE: Stream removed")
    body, headers = {**BODY, "logprobs": 1}, {"X-Request-Id": "r-scored"}
    streamed = await client.post("/v1/completions", json={**body, "stream": True}, headers=headers)
    assert sse(streamed.text)[-1][0] == "error"
    backend.error_after = None
    for _ in range(2):  # resumed, then replayed from its stored result
        reply = (await client.post("/v1/completions", json=body, headers=headers)).raise_for_status().json()
        logprobs = reply["choices"][0]["logprobs"]
        assert reply["choices"][0]["text"] == "Hello, world"
        assert logprobs["token_logprobs"] == [-0.25, -1.25, -0.5, -0.75]
    assert len(backend.requests) == 2
