"""Gateway test fixtures: a tiny real tokenizer, a temporary switchyard.yaml pointing at it,
a scripted fake `GenerationBackend`, and the app served in-process through httpx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import uvloop
from fastapi import FastAPI
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from build_engines.tokenizer import LLAMA_CHAT_TEMPLATE
from config.settings import SwitchyardConfig, load_config
from contracts.generation import (
    BackendError,
    GenerationBackend,
    GenerationDelta,
    GenerationRequest,
    PoolReadiness,
    Usage,
)
from gateway.app import create_app
from gateway.settings import GatewaySettings
from quota.capacity import StaticCapacity
from quota.key_files import ADMIN_KEY_ENV
from quota.keys import SyncKeyStore
from serving.metrics import GatewayMetrics
from serving.requests_registry import RequestRegistry
from tests.auth_headers import bearer

# The loops an async test may ask for with `pytest.mark.asyncio(loop_factories=[...])`: the
# gateway serves on uvloop's (gateway/server.py); a test that names none runs on the standard one.
LOOP_FACTORIES: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    marker = item.get_closest_marker("asyncio")
    asked = marker.kwargs.get("loop_factories") if marker is not None else None
    return LOOP_FACTORIES if asked else {"asyncio": LOOP_FACTORIES["asyncio"]}


SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "a ten token answer stuck behind a long report",
    "every long document makes everyone's replies stutter",
    "the same nine thousand tokens read again and again",
    "servers that take eight minutes to help",
]
SMALL_CONTEXT = 64

CONFIG_YAML = """
models:
  small: {{weights_uri: models/small, max_context_tokens: {small_context}}}
  large: {{weights_uri: models/large, max_context_tokens: 36864}}
pools:
  small: {{model_id: small, ports: {{http: 9101, grpc: 9102, metrics: 9103}}}}
  large: {{model_id: large, ports: {{http: 9201, grpc: 9202, metrics: 9203}}}}
redis: {{port: {redis_port}}}
secrets_dir: {secrets_dir}
teams:
  alpha: {{weight: 1}}
  beta: {{weight: 1, models: [small], default_class: bulk}}
quota: {{queue_timeout_s: 0.3}}
"""
ADMIN_KEY = "sy-admin-key-for-tests"
# Capacity the fake fleet reports: plenty, so admission admits unless a test says otherwise.
CAPACITY_TOKENS = 1_000_000


class FakeBackend:
    """A scripted backend. By default each request streams `deltas`; with `hold_after=n` it
    stops after n deltas and waits until cancelled (or until `resume` is set, then goes on).
    A request that resumes (`resume_token_ids`) skips the deltas whose tokens it has, as a
    server replays them without sending them again. It records what the gateway asked of it,
    and which streams were closed early (what frees the server's KV in the real one)."""

    def __init__(self) -> None:
        self.deltas: list[GenerationDelta] = [
            GenerationDelta(text="Hello", token_ids=(5, 6)),
            GenerationDelta(text=", ", token_ids=(7,)),
            GenerationDelta(text="world", token_ids=(8,), finish_reason="length"),
        ]
        self.hold_after: int | None = None
        self.resume = asyncio.Event()
        self.honour_cancel = True
        self.delay_s = 0.0
        self.error_after: int | None = None  # raise `error` after this many deltas
        self.error: BackendError = BackendError("engine failed")
        self.fail_on_cancel = False  # a held stream raises `error` when cancelled (its link broke)
        self.pools = [PoolReadiness("small", "small", True), PoolReadiness("large", "large", True)]
        self.requests: list[GenerationRequest] = []
        self.cancel_calls: list[str] = []
        self.closed: list[str] = []
        self.closed_backend = False
        self._cancel_events: dict[str, asyncio.Event] = {}

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        self.requests.append(request)
        cancelled = self._cancel_events[request.request_id] = asyncio.Event()
        ended = False
        replayed = len(request.resume_token_ids)
        try:
            for index, delta in enumerate(self.deltas):
                if replayed and delta.token_ids and delta.finish_reason is None:
                    replayed -= len(delta.token_ids)  # the caller has it: not sent again
                    continue
                if index == self.error_after:
                    ended = True
                    raise self.error
                if index == self.hold_after:
                    await first_of(cancelled, self.resume)
                    if cancelled.is_set():
                        ended = True
                        if self.fail_on_cancel:
                            raise self.error
                        yield GenerationDelta(finish_reason="cancelled")
                        return
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                ended = delta.finish_reason is not None
                yield delta
        finally:
            self._cancel_events.pop(request.request_id, None)
            if not ended:
                self.closed.append(request.request_id)

    async def cancel(self, request_id: str) -> bool:
        self.cancel_calls.append(request_id)
        event = self._cancel_events.get(request_id)
        if event is None or not self.honour_cancel:
            return False
        event.set()
        return True

    async def readiness(self) -> list[PoolReadiness]:
        return list(self.pools)

    async def close(self) -> None:
        self.closed_backend = True


async def first_of(*events: asyncio.Event) -> None:
    """Wait until any of `events` is set."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(SENTENCES, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


@pytest.fixture
def config_path(tmp_path: Path, tokenizer_json: Path, redis_url: str, redis_secrets: Path) -> Path:
    for model_id in ("small", "large"):
        model_dir = tmp_path / "models" / model_id
        model_dir.mkdir(parents=True)
        (model_dir / "tokenizer.json").write_bytes(tokenizer_json.read_bytes())
    path = tmp_path / "switchyard.yaml"
    path.write_text(
        CONFIG_YAML.format(
            small_context=SMALL_CONTEXT,
            redis_port=redis_url.rsplit(":", 1)[1].split("/")[0],
            secrets_dir=redis_secrets,
        )
    )
    return path


@pytest.fixture
def chat_template(config_path: Path) -> None:
    """Both models ship the Llama 2 template, so chat requests reach the backend. (The test
    tokenizer has no `<s>` token, so the template's BOS text stays in the prompt.)"""
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": LLAMA_CHAT_TEMPLATE}
    for model_id in ("small", "large"):
        (config_path.parent / "models" / model_id / "tokenizer_config.json").write_text(json.dumps(config))


@pytest.fixture
def count_tokens(tokenizer_json: Path) -> Callable[[str], int]:
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    return lambda text: len(tokenizer.encode(text).ids)


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def new_backend() -> Callable[[], FakeBackend]:
    """Another FakeBackend, for a second gateway process in one test."""
    return FakeBackend


@pytest.fixture
def capacity() -> StaticCapacity:
    """Each pool's KV capacity as admission sees it (a module may override it)."""
    return StaticCapacity({"small": CAPACITY_TOKENS, "large": CAPACITY_TOKENS})


@pytest.fixture
def settings(config_path: Path) -> GatewaySettings:
    return GatewaySettings(config=config_path, cancel_grace_s=0.5, sse_heartbeat_s=5.0)


def build_app(settings: GatewaySettings, backend: FakeBackend, capacity: StaticCapacity) -> FastAPI:
    """The gateway app over `backend`, admitting against `capacity`; run its lifespan to serve."""

    def factory(config: SwitchyardConfig, settings: GatewaySettings, metrics: GatewayMetrics) -> GenerationBackend:
        return backend

    return create_app(settings, backend_factory=factory, capacity=capacity)


@pytest.fixture
def admin_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The admin key of every app a test builds (the environment wins over var/admin-api-key)."""
    monkeypatch.setenv(ADMIN_KEY_ENV, ADMIN_KEY)
    return ADMIN_KEY


@pytest.fixture
def make_app(settings: GatewaySettings, capacity: StaticCapacity, admin_key: str) -> Callable[[FakeBackend], FastAPI]:
    """A gateway app (lifespan not run) on the test's config, Redis, capacity and admin key."""
    return lambda backend: build_app(settings, backend, capacity)


@pytest.fixture
async def app(make_app: Callable[[FakeBackend], FastAPI], backend: FakeBackend) -> AsyncIterator[FastAPI]:
    application = make_app(backend)
    async with application.router.lifespan_context(application):
        yield application
    assert backend.closed_backend


@pytest.fixture
def make_key(config_path: Path, redis_url: str) -> Iterator[Callable[[str], str]]:
    """`make_key(team)`: a new API key of a team of the test config, in the test's Redis."""
    client = redis.Redis.from_url(redis_url)
    yield SyncKeyStore(client, load_config(config_path).teams).create
    client.close()


@pytest.fixture
def team_key(make_key: Callable[[str], str]) -> str:
    """An API key of team `alpha` (every model allowed)."""
    return make_key("alpha")


@pytest.fixture
async def client(app: FastAPI, team_key: str) -> AsyncIterator[httpx.AsyncClient]:
    """The app in-process, sending team alpha's key unless a test sets another header."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=bearer(team_key)) as http:
        yield http


@pytest.fixture
async def anonymous(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The app in-process, sending no API key."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as http:
        yield http


@pytest.fixture
def registry(app: FastAPI) -> RequestRegistry:
    registry = app.state.services.registry
    assert isinstance(registry, RequestRegistry)
    return registry


def parse_sse(body: str) -> list[tuple[str | None, Any]]:
    """(event name, decoded data) per SSE event; `[DONE]` stays a string; comments dropped."""
    events: list[tuple[str | None, Any]] = []
    for block in body.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        name = next((line.removeprefix("event: ") for line in lines if line.startswith("event: ")), None)
        data = "\n".join(line.removeprefix("data: ") for line in lines if line.startswith("data: "))
        events.append((name, data if data == "[DONE]" else json.loads(data)))
    return events


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 2.0) -> None:
    """Poll `predicate` until it holds; fail the test after `timeout_s`."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


@pytest.fixture
def until() -> Callable[..., Awaitable[None]]:
    """`await until(predicate)`: poll until it holds, failing the test after 2 s."""
    return wait_until


@pytest.fixture
def sse() -> Callable[[str], list[tuple[str | None, Any]]]:
    return parse_sse


def usage(prompt: int, completion: int, cached: int = 0) -> dict[str, int]:
    return Usage(prompt, cached, completion).as_dict()


@pytest.fixture
def make_usage() -> Callable[..., dict[str, int]]:
    return usage
