"""S1's in-process engine comparison runs only when the stack serves on the CPU engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_s1_short_behind_long import engine_alone
from config.settings import ServingSpec, SwitchyardConfig, load_config
from engine.config import EngineConfig

CONFIG = """
models:
  small: {weights_uri: models/small, max_context_tokens: 64}
pools:
  small: {model_id: small, ports: {http: 9101, grpc: 9102, metrics: 9103}}
"""


@pytest.fixture
def unbuilt(tmp_path: Path) -> SwitchyardConfig:
    """A config whose `small` model was never built: running the engine would fail at once."""
    path = tmp_path / "switchyard.yaml"
    path.write_text(CONFIG)
    return load_config(path)


def test_engine_alone_is_skipped_off_the_cpu_target(unbuilt: SwitchyardConfig) -> None:
    trtllm = unbuilt.model_copy(update={"serving": ServingSpec(target="trtllm")})
    assert engine_alone(trtllm, "small", EngineConfig()) is None


def test_engine_alone_runs_on_the_cpu_target(unbuilt: SwitchyardConfig) -> None:
    # It tries: loading the unbuilt model's tokenizer fails (tokenizers raises a bare Exception).
    with pytest.raises(Exception, match="No such file or directory"):
        engine_alone(unbuilt, "small", EngineConfig())
