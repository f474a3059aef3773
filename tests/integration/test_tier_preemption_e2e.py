"""Tiers on real servers (issue 40, docs/tiers.md): what tests/engine/test_llm_engine_tiers.py
shows on one engine, here through a real `tritonserver` and a real gateway process.

    TritonBackend (the gateway's own client) ──gRPC + inference key──▶ tritonserver `llm`
        2,048 KV tokens: a long reply and a priority request's prompt cannot both fit, and
        nothing in front of the server keeps them apart (no admission)

    httpx ──▶ gateway process (own Redis, quota.flex_wait_s 0.5 s) ──▶ tritonserver
        one long default-tier reply leases the pool's KV: a flex request has no room

The engine exports no preemption counter. A preemption shows in its per-class gauges
(`switchyard_engine_requests`, `switchyard_engine_kv_blocks`) as a reply still in the engine that
holds no KV once it has streamed tokens: a sampler thread reads them from /metrics while the
replies run. The tiny model is random but greedy decoding is deterministic, so a reply is
compared with the same request run alone on the same server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import pytest
import redis
import tritonclient.grpc.aio as grpcclient
from prometheus_client.parser import text_string_to_metric_families

from build_engines.repository import fill_repository
from config.settings import SwitchyardConfig, TeamSpec, dump_config
from config.tier_names import RequestClass
from contracts.generation import GenerationRequest
from contracts.metric_names import CLASS_METRIC, KV_CLASS_METRIC
from contracts.token_ids import PackedTokenIds
from quota.key_files import ADMIN_KEY_ENV
from quota.keys import SyncKeyStore
from router.triton_backend import TritonBackend
from server_host.ports import free_ports
from server_host.process import ManagedProcess, wait_until
from server_host.triton_server import TritonServer
from stack.redis_server import RedisServer
from stack.secret_files import ensure_secret_files
from tests.auth_headers import bearer

from .conftest import MODEL_ID, TinyModel, TritonPool

pytestmark = pytest.mark.integration

BLOCK = 16
# 128 blocks. A long reply alone fits (126 blocks); once it has streamed TRIGGER tokens it holds
# at least 70, and a priority prompt of 60 blocks no longer fits beside it: the priority request
# can be admitted only by taking the long reply's KV, or by waiting for its end.
TIGHT_KV = 2048
LONG_PROMPT, LONG_TOKENS = 16, 2000
PRIORITY_PROMPT, PRIORITY_TOKENS = 960, 200  # above the express lane's 16 tokens
TRIGGER = 1100

FLEX_WAIT_S = 0.5
QUEUE_TIMEOUT_S = 5.0
REFUSAL_MARGIN_S = 2.0  # a busy two-core machine's slack on top of the bounded wait
ROOM_KV = 8192
# Leases prompt + FILL_TOKENS of the pool's ROOM_KV: no flex request of FLEX_TOKENS fits beside it.
FILL_TOKENS, FLEX_TOKENS = 8000, 200
DEADLINE_S = 60.0


def blocks(tokens: int) -> int:
    return math.ceil(tokens / BLOCK)


assert blocks(LONG_PROMPT + LONG_TOKENS) <= blocks(TIGHT_KV)  # the long reply fits alone ...
assert blocks(LONG_PROMPT + TRIGGER) + blocks(PRIORITY_PROMPT) > blocks(TIGHT_KV)  # ... and fills it


def engine(kv_capacity_tokens: int) -> dict[str, object]:
    # No prefix cache: a reply run alone leaves no blocks behind that change the contended run's sums.
    return {"kv_capacity_tokens": kv_capacity_tokens, "block_size": BLOCK, "max_num_seqs": 16,
            "max_num_batched_tokens": 256, "enable_prefix_caching": False}  # fmt: skip


def pool_config(tiny_model: TinyModel, root: Path, pool_id: str, kv_capacity_tokens: int) -> SwitchyardConfig:
    """One pool of the session's tiny model (built once, read where it lies) with its own KV."""
    http, grpc, metrics = free_ports(3)
    model = tiny_model.config.models[MODEL_ID].model_copy(update={"weights_uri": str(tiny_model.model_dir)})
    return SwitchyardConfig.model_validate(
        {
            "root": root,
            "models": {MODEL_ID: model},
            "pools": {
                pool_id: {
                    "model_id": MODEL_ID,
                    "engine": engine(kv_capacity_tokens),
                    "ports": {"http": http, "grpc": grpc, "metrics": metrics},
                }
            },
        }
    )


@contextlib.contextmanager
def serving(config: SwitchyardConfig, pool_id: str) -> Iterator[TritonPool]:
    """The pool's server, as `make up` runs it: inference only with the gateway's key."""
    secrets = ensure_secret_files(config.secrets_path)
    server = TritonServer(
        fill_repository(config, pool_id),
        config.pools[pool_id].ports,
        var_dir=config.var_path,
        name=pool_id,
        inference_key=secrets.triton_inference_key,
        host=config.network.servers.bind_host,
        keepalive=config.network.triton_grpc,
    )
    with server:
        yield TritonPool(pool_id, MODEL_ID, config.model_dir(MODEL_ID), config, server)


@pytest.fixture(scope="module")
def tight_pool(tiny_model: TinyModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonPool]:
    config = pool_config(tiny_model, tmp_path_factory.mktemp("tight_pool"), "tight", TIGHT_KV)
    with serving(config, "tight") as pool:
        yield pool


# -- the engine's gauges by class ------------------------------------------------------------


@dataclass(frozen=True)
class ClassGauges:
    """One scrape: requests in the engine (admitted or waiting) and the KV blocks they hold, by class."""

    requests: dict[str, int]
    blocks: dict[str, int]

    @classmethod
    def parse(cls, metrics_text: str) -> ClassGauges:
        wanted = tuple(f"{name}{{" for name in (CLASS_METRIC, KV_CLASS_METRIC))
        lines = "\n".join(line for line in metrics_text.splitlines() if line.startswith(wanted)) + "\n"
        found: dict[str, dict[str, int]] = {CLASS_METRIC: {}, KV_CLASS_METRIC: {}}
        for family in text_string_to_metric_families(lines):
            for sample in family.samples:
                found[sample.name][sample.labels["request_class"]] = int(sample.value)
        return cls(found[CLASS_METRIC], found[KV_CLASS_METRIC])

    def holds_no_kv(self, request_class: str) -> bool:
        """A request of the class is in the engine and holds no blocks: it waits (for admission,
        or preempted, to be recomputed)."""
        return self.requests.get(request_class, 0) > 0 and self.blocks.get(request_class, 0) == 0


class GaugeSampler:
    """Scrapes the server's /metrics every `interval_s` in a thread while the block runs."""

    def __init__(self, metrics_url: str, interval_s: float = 0.01) -> None:
        self.samples: list[ClassGauges] = []
        self._url, self._interval_s = metrics_url, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gauge-sampler", daemon=True)

    def __enter__(self) -> GaugeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(timeout=2) as client:
            while not self._stop.wait(self._interval_s):
                try:
                    self.samples.append(ClassGauges.parse(client.get(self._url).text))
                except httpx.HTTPError:
                    continue  # a scrape the busy server did not answer in time: the next one may


# -- replies straight from `llm` -------------------------------------------------------------


@dataclass
class Reply:
    """What one request streamed, and when (monotonic seconds) its first and last tokens came."""

    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    first_at: float = 0.0
    finished_at: float = 0.0


def prompt_ids(seed: int, length: int) -> list[int]:
    return [(seed * 31 + i * 7) % 500 + 3 for i in range(length)]


def greedy(name: str, seed: int, prompt_length: int, max_tokens: int, request_class: RequestClass) -> GenerationRequest:
    return GenerationRequest(
        request_id=name,
        model_id=MODEL_ID,
        prompt="",
        max_tokens=max_tokens,
        request_class=request_class,
        temperature=0.0,
        top_k=1,
        ignore_eos=True,
        prompt_token_ids=PackedTokenIds.pack(prompt_ids(seed, prompt_length)),
    )


def fresh(request: GenerationRequest) -> GenerationRequest:
    """The same request under an id of its own (the server runs one request per id at a time)."""
    return replace(request, request_id=f"{request.request_id}-{uuid.uuid4().hex[:8]}")


@contextlib.asynccontextmanager
async def llm_backend(pool: TritonPool) -> AsyncIterator[TritonBackend]:
    """The gateway's client of Triton, pointed at `pool` alone."""
    backend = TritonBackend(
        {pool.pool_id: grpcclient.InferenceServerClient(pool.grpc_url)}, {pool.pool_id: MODEL_ID}, headers=pool.headers
    )
    try:
        yield backend
    finally:
        await backend.close()


async def run(
    backend: TritonBackend, pool: TritonPool, request: GenerationRequest, streamed: asyncio.Event | None = None
) -> Reply:
    """Stream `request` to its end; `streamed` is set once TRIGGER tokens have come."""
    reply = Reply()
    async with contextlib.aclosing(backend.stream_on(pool.pool_id, fresh(request))) as deltas:
        async for delta in deltas:
            reply.token_ids += delta.token_ids
            if delta.token_ids and not reply.first_at:
                reply.first_at = time.monotonic()
            if streamed is not None and len(reply.token_ids) >= TRIGGER:
                streamed.set()
            reply.finish_reason = delta.finish_reason
    reply.finished_at = time.monotonic()
    assert reply.finish_reason == "length", reply.finish_reason
    return reply


async def contend(
    backend: TritonBackend, pool: TritonPool, long: GenerationRequest, urgent: GenerationRequest
) -> tuple[Reply, Reply]:
    """Start `long`; once it has streamed TRIGGER tokens (its KV and `urgent`'s prompt no longer
    fit together), run `urgent` beside it. Both replies, when both have ended."""
    streamed = asyncio.Event()
    long_reply = asyncio.create_task(run(backend, pool, long, streamed))
    await asyncio.wait({long_reply, asyncio.create_task(streamed.wait())}, timeout=DEADLINE_S,
                       return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
    assert streamed.is_set() and not long_reply.done(), "the long reply ended before it filled the KV"
    urgent_reply = await asyncio.wait_for(run(backend, pool, urgent), DEADLINE_S)
    return await asyncio.wait_for(long_reply, DEADLINE_S), urgent_reply


async def test_a_priority_request_preempts_flex_on_a_full_server_and_both_replies_stay_exact(
    tight_pool: TritonPool,
) -> None:
    flex = greedy("flex", 1, LONG_PROMPT, LONG_TOKENS, "flex")
    urgent = greedy("priority", 3, PRIORITY_PROMPT, PRIORITY_TOKENS, "priority")
    async with llm_backend(tight_pool) as backend:
        alone = {r.request_id: (await run(backend, tight_pool, r)).token_ids for r in (flex, urgent)}  # one at a time
        with GaugeSampler(tight_pool.metrics_url) as gauges:
            flex_reply, urgent_reply = await contend(backend, tight_pool, flex, urgent)

    assert flex_reply.token_ids == alone["flex"]
    assert urgent_reply.token_ids == alone["priority"]
    assert urgent_reply.finished_at < flex_reply.finished_at
    # The flex reply, which had streamed TRIGGER tokens, sat in the engine without KV while
    # the priority request held it: preempted, and resumed token for token afterwards.
    preempted = [s for s in gauges.samples if s.holds_no_kv("flex") and s.blocks.get("priority", 0) > 0]
    assert preempted, f"no scrape of {len(gauges.samples)} saw flex preempted"


async def test_a_priority_request_waits_for_an_interactive_reply_rather_than_preempt_it(
    tight_pool: TritonPool,
) -> None:
    person = greedy("person", 2, LONG_PROMPT, LONG_TOKENS, "interactive")
    urgent = greedy("priority", 3, PRIORITY_PROMPT, PRIORITY_TOKENS, "priority")
    async with llm_backend(tight_pool) as backend:
        alone = {r.request_id: (await run(backend, tight_pool, r)).token_ids for r in (person, urgent)}
        with GaugeSampler(tight_pool.metrics_url) as gauges:
            person_reply, urgent_reply = await contend(backend, tight_pool, person, urgent)

    assert person_reply.token_ids == alone["person"]
    assert urgent_reply.token_ids == alone["priority"]
    assert person_reply.finished_at < urgent_reply.finished_at
    side_by_side = [s for s in gauges.samples if s.requests.get("interactive", 0) and s.requests.get("priority", 0)]
    assert side_by_side, "no scrape saw the priority request arrive while the interactive reply ran"
    # While the interactive reply was in the engine it always held its KV, and the priority
    # request never got any: it waited for the reply's end.
    assert not [s for s in side_by_side if s.holds_no_kv("interactive") or s.blocks.get("priority", 0)]


# -- flex at a real gateway ------------------------------------------------------------------


@dataclass(frozen=True)
class TierGateway:
    url: str
    api_key: str

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.api_key)


@pytest.fixture(scope="module")
def room_gateway(tiny_model: TinyModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TierGateway]:
    """A gateway (one worker, its own Redis) in front of a server of ROOM_KV tokens, with a
    short flex wait; team `tiers` may use every tier."""
    root = tmp_path_factory.mktemp("room_gateway")
    port, redis_port, grpc_port = free_ports(3)
    base = pool_config(tiny_model, root, "room", ROOM_KV)
    config = base.model_copy(
        update={
            "redis": base.redis.model_copy(update={"port": redis_port}),
            "teams": {"tiers": TeamSpec(weight=1.0, tiers={"priority": 1, "default": 1, "flex": 1, "batch": 1})},
            "quota": base.quota.model_copy(update={"flex_wait_s": FLEX_WAIT_S, "queue_timeout_s": QUEUE_TIMEOUT_S}),
            "gateway": base.gateway.model_copy(update={"grpc_port": grpc_port}),
        }
    )
    with serving(config, "room"):
        redis_server = RedisServer(redis_port, root / "redis", root / "redis.log", secrets_dir=config.secrets_path)
        redis_server.start()
        try:
            api_key = SyncKeyStore(redis.Redis.from_url(redis_server.url), config.teams).create("tiers")
            config_path = dump_config(config, config.var_path / "run" / "gw.yaml")
            env = {
                **os.environ,
                "SWITCHYARD_CONFIG": str(config_path),
                "SWITCHYARD_PORT": str(port),
                "SWITCHYARD_WORKERS": "1",
                ADMIN_KEY_ENV: f"sy-admin-{uuid.uuid4().hex}",
            }
            log = config.var_path / "logs" / "gw.log"
            process = ManagedProcess("gateway", [sys.executable, "-m", "gateway"], log, env=env)
            gateway = TierGateway(f"http://127.0.0.1:{port}", api_key)
            with process:
                assert wait_until(lambda: _ready(gateway.url) or not process.alive(), DEADLINE_S), process.log_tail()
                assert process.alive(), process.log_tail()
                # Admission knows the pool's KV once it has read the server's metrics: a default
                # request queues until then (queue_timeout_s), so one answered means it has.
                warm = httpx.post(f"{gateway.url}/v1/completions", headers=gateway.headers, timeout=DEADLINE_S,
                                  json={"model": MODEL_ID, "prompt": "warm up", "max_tokens": 2})  # fmt: skip
                assert warm.status_code == 200, warm.text
                yield gateway
        finally:
            redis_server.stop()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _stop_reason(events: Iterator[str]) -> str | None:
    """The stop reason of a /v1/generate stream, read to its end."""
    reason = None
    for line in events:
        if line.startswith("data: {"):
            reason = json.loads(line.removeprefix("data: ")).get("stop_reason") or reason
    return reason


def test_flex_on_a_pool_with_no_room_is_a_429_within_its_bound_then_runs_once_room_frees(
    room_gateway: TierGateway,
) -> None:
    url, headers = room_gateway.url, room_gateway.headers
    fill = {"model": MODEL_ID, "prompt": "fill the pool", "max_tokens": FILL_TOKENS, "ignore_eos": True,
            "stream": True, "class": "interactive", "request_id": f"fill-{uuid.uuid4().hex[:8]}"}  # fmt: skip
    flex = {"model": MODEL_ID, "prompt": "a flex request", "max_tokens": FLEX_TOKENS, "service_tier": "flex"}
    with httpx.Client(base_url=url, headers=headers, timeout=DEADLINE_S) as client:
        with client.stream("POST", "/v1/generate", json=fill) as filling:
            assert filling.status_code == 200, filling.read()
            events = filling.iter_lines()
            assert any(line.startswith("data: ") for line in events)  # running: its lease holds the pool
            started = time.monotonic()
            refused = client.post("/v1/completions", json=flex)
            waited_s = time.monotonic() - started
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "flex_capacity_unavailable", refused.text
            assert int(refused.headers["retry-after"]) >= 1
            # It waited its bounded wait for room, then answered: not the default tier's queue timeout.
            assert FLEX_WAIT_S * 0.9 <= waited_s <= FLEX_WAIT_S + REFUSAL_MARGIN_S < QUEUE_TIMEOUT_S, waited_s
            cancelled = client.delete(f"/v1/generate/{fill['request_id']}")
            assert cancelled.status_code == 200, cancelled.text
            assert cancelled.json()["status"] == "cancelled"  # it was still running when flex was refused
            assert _stop_reason(events) == "cancelled"
        served = client.post("/v1/completions", json=flex)
    assert served.status_code == 200, served.text
    assert served.json()["service_tier"] == "flex"
    assert served.json()["choices"][0]["finish_reason"] in ("length", "stop")
