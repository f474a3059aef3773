"""Sampling defaults per route: the OpenAI routes sample at OpenAI's temperature 1 unless told
otherwise, `/v1/generate` keeps its documented greedy default; a sampled reply without a seed
gets one from the gateway, which a retry of its id resumes with (one reply, not two spliced)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from contracts.generation import BackendError

from .conftest import FakeBackend

COMPLETION = {"model": "small", "prompt": "the quick brown fox", "max_tokens": 3}
CHAT = {"model": "small", "messages": [{"role": "user", "content": "the fox"}], "max_tokens": 3}
OPENAI = [("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT)]

pytestmark = pytest.mark.usefixtures("chat_template")


@pytest.mark.parametrize(("path", "body"), OPENAI)
async def test_the_openai_routes_sample_at_temperature_1_by_default(
    client: httpx.AsyncClient, backend: FakeBackend, path: str, body: dict[str, Any]
) -> None:
    for sent in (body, {**body, "temperature": None}):
        (await client.post(path, json=sent)).raise_for_status()
    assert [r.temperature for r in backend.requests] == [1.0, 1.0]
    seeds = [r.seed for r in backend.requests]
    assert all(isinstance(seed, int) for seed in seeds) and seeds[0] != seeds[1]  # each its own draw


@pytest.mark.parametrize(("path", "body"), OPENAI)
async def test_a_callers_temperature_and_seed_are_kept(
    client: httpx.AsyncClient, backend: FakeBackend, path: str, body: dict[str, Any]
) -> None:
    (await client.post(path, json={**body, "temperature": 0.7, "seed": 3})).raise_for_status()
    (await client.post(path, json={**body, "temperature": 0})).raise_for_status()
    assert [(r.temperature, r.seed) for r in backend.requests] == [(0.7, 3), (0.0, None)]  # greedy: no seed


async def test_generate_keeps_its_greedy_default(client: httpx.AsyncClient, backend: FakeBackend) -> None:
    (await client.post("/v1/generate", json=COMPLETION)).raise_for_status()
    assert [(r.temperature, r.seed) for r in backend.requests] == [(None, None)]


async def test_a_retry_of_a_failed_sampled_reply_draws_from_the_same_seed(
    client: httpx.AsyncClient, backend: FakeBackend
) -> None:
    backend.error_after = 2
    backend.error = BackendError("server 'x': UNAVAILABLE: Stream removed")
    headers = {"X-Request-Id": "r-sampled"}
    assert (await client.post("/v1/completions", json=COMPLETION, headers=headers)).status_code == 502
    backend.error_after = None
    (await client.post("/v1/completions", json=COMPLETION, headers=headers)).raise_for_status()
    first, resumed = backend.requests
    assert resumed.resume_token_ids == (5, 6, 7) and resumed.seed == first.seed is not None
