"""S1's in-process engine comparison: skipped off the CPU target; on it, the short request is
timed on an idle engine and then behind every long reply."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import bench.bench_s1_short_behind_long as s1
from bench.bench_s1_short_behind_long import LONG_REPLIES, engine_alone
from build_engines.build import build_model
from config.settings import ServingSpec, SwitchyardConfig, load_config
from engine.config import EngineConfig
from engine.engine_loop import EngineLoop, RequestStream
from engine.llm_engine import LLMEngine
from engine.request import EngineRequest

# A real model small enough to build in a fraction of a second, and big enough that the long
# replies are still decoding when the loaded figure is taken (on this CPU: ~350 of their
# 2,000 tokens by the end of the run). The context window holds a whole long reply, so none
# of them can end early at the window.
CONFIG = """
models:
  small:
    weights_uri: models/small
    max_context_tokens: 4096
    architecture:
      {hidden_size: 128, intermediate_size: 256, num_hidden_layers: 4, num_attention_heads: 4,
       num_key_value_heads: 2, vocab_size: 320}
pools:
  small: {model_id: small, ports: {http: 9101, grpc: 9102, metrics: 9103}}
"""


def quiet(_: str) -> None:
    """Swallow the build's progress lines."""


@pytest.fixture
def config(tmp_path: Path) -> SwitchyardConfig:
    path = tmp_path / "switchyard.yaml"
    path.write_text(CONFIG)
    return load_config(path)


class WatchedLoop(EngineLoop):
    """An EngineLoop that notes, as each request is submitted, how many unfinished requests
    the engine held at its latest step."""

    def __init__(self, engine: LLMEngine) -> None:
        super().__init__(engine)
        self.held_at_submit: dict[str, int] = {}

    def submit(self, request: EngineRequest, notify: Callable[[], None] | None = None) -> RequestStream:
        stats = self.stats()
        self.held_at_submit[request.request_id] = stats.active_requests + stats.waiting_requests
        return super().submit(request, notify)


def test_engine_alone_is_skipped_off_the_cpu_target(config: SwitchyardConfig) -> None:
    trtllm = config.model_copy(update={"serving": ServingSpec(target="trtllm")})
    assert engine_alone(trtllm, "small", EngineConfig()) is None  # the model was never built


def test_engine_alone_times_the_short_request_idle_then_behind_every_long_reply(
    config: SwitchyardConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_model("small", config.models["small"], config.model_dir("small"), log=quiet)
    loops: list[WatchedLoop] = []

    def watched(engine: LLMEngine) -> WatchedLoop:
        loops.append(WatchedLoop(engine))
        return loops[-1]

    monkeypatch.setattr(s1, "EngineLoop", watched)
    figures = engine_alone(config, "small", EngineConfig())

    assert figures is not None and set(figures) == {"idle", "loaded"}
    # Both timed (which is larger is the benchmark's finding, not the test's: with the express
    # lane the short request's steps are its own, and on a busy machine either may come out ahead).
    assert figures["idle"] > 0 and figures["loaded"] > 0
    (loop,) = loops
    held = loop.held_at_submit
    idle = [n for request_id, n in held.items() if request_id.startswith("short-idle")]
    loaded = [n for request_id, n in held.items() if request_id.startswith("short-loaded")]
    assert idle and set(idle) == {0}
    assert loaded and set(loaded) == {LONG_REPLIES}  # no long reply had finished
