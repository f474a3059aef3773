"""Gateway test fixtures: a tiny real tokenizer, a temporary switchyard.yaml pointing at it,
a scripted fake `GenerationBackend`, and the app served in-process through httpx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from gateway.app import create_app
from gateway.backend import (
    BackendError,
    GenerationBackend,
    GenerationDelta,
    GenerationRequest,
    PoolReadiness,
    Usage,
)
from gateway.requests_registry import RequestRegistry
from gateway.settings import GatewaySettings
from switchyard.config import SwitchyardConfig

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "a ten token answer stuck behind a long report",
    "every long document makes everyone's replies stutter",
    "the same nine thousand tokens read again and again",
    "servers that take eight minutes to help",
]
SMALL_CONTEXT = 64

CONFIG_YAML = f"""
models:
  small: {{weights_uri: models/small, max_context_tokens: {SMALL_CONTEXT}}}
  large: {{weights_uri: models/large, max_context_tokens: 36864}}
pools:
  small: {{model_id: small, ports: {{http: 9101, grpc: 9102, metrics: 9103}}}}
  large: {{model_id: large, ports: {{http: 9201, grpc: 9202, metrics: 9203}}}}
"""


class FakeBackend:
    """A scripted backend. By default each request streams `deltas`; with `hold_after=n` it
    stops after n deltas and waits until cancelled. It records what the gateway asked of it,
    and which streams were closed early (what frees the server's KV in the real one)."""

    def __init__(self) -> None:
        self.deltas: list[GenerationDelta] = [
            GenerationDelta(text="Hello", token_ids=(5, 6)),
            GenerationDelta(text=", ", token_ids=(7,)),
            GenerationDelta(text="world", token_ids=(8,), finish_reason="length"),
        ]
        self.hold_after: int | None = None
        self.honour_cancel = True
        self.delay_s = 0.0
        self.error_after: int | None = None  # raise `error` after this many deltas
        self.error: BackendError = BackendError("engine failed")
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
        try:
            for index, delta in enumerate(self.deltas):
                if index == self.error_after:
                    ended = True
                    raise self.error
                if index == self.hold_after:
                    await cancelled.wait()
                    ended = True
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


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(SENTENCES, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


@pytest.fixture
def config_path(tmp_path: Path, tokenizer_json: Path) -> Path:
    for model_id in ("small", "large"):
        model_dir = tmp_path / "models" / model_id
        model_dir.mkdir(parents=True)
        (model_dir / "tokenizer.json").write_bytes(tokenizer_json.read_bytes())
    path = tmp_path / "switchyard.yaml"
    path.write_text(CONFIG_YAML)
    return path


@pytest.fixture
def count_tokens(tokenizer_json: Path) -> Callable[[str], int]:
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    return lambda text: len(tokenizer.encode(text).ids)


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def settings(config_path: Path) -> GatewaySettings:
    return GatewaySettings(config=config_path, cancel_grace_s=0.5, sse_heartbeat_s=5.0)


@pytest.fixture
async def app(settings: GatewaySettings, backend: FakeBackend) -> AsyncIterator[FastAPI]:
    def factory(config: SwitchyardConfig, settings: GatewaySettings) -> GenerationBackend:
        return backend

    application = create_app(settings, backend_factory=factory)
    async with application.router.lifespan_context(application):
        yield application
    assert backend.closed_backend


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
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


@pytest.fixture
def sse() -> Callable[[str], list[tuple[str | None, Any]]]:
    return parse_sse


def usage(prompt: int, completion: int, cached: int = 0) -> dict[str, int]:
    return Usage(prompt, cached, completion).as_dict()


@pytest.fixture
def make_usage() -> Callable[..., dict[str, int]]:
    return usage
