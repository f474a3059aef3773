"""A measurement's stacks (`stack.measured_stack`) stream as the configuration's own pools do."""

from __future__ import annotations

from pathlib import Path

from config.settings import EngineSpec, PoolSpec, load_config
from stack.measured_stack import measured_config

CONFIG = """
models:
  small: {weights_uri: models/small, max_context_tokens: 4096}
  large: {weights_uri: models/large, max_context_tokens: 4096}
pools:
  chat:
    model_id: small
    stream_interval_ms: 25
    max_stream_responses_per_s: 100
    ports: {http: 9101, grpc: 9102, metrics: 9103}
"""


def test_a_bench_pool_paces_its_stream_as_the_pool_of_its_model(tmp_path: Path) -> None:
    path = tmp_path / "switchyard.yaml"
    path.write_text(CONFIG)
    base = load_config(path)
    config = measured_config(
        base, {"bench-small": ("small", EngineSpec()), "bench-large": ("large", EngineSpec())}, {"bench": 1.0}
    )
    small, large = config.pools["bench-small"], config.pools["bench-large"]
    assert (small.stream_interval_ms, small.max_stream_responses_per_s) == (25, 100)
    # No pool of `large` in the file: the defaults.
    defaults = PoolSpec.model_fields
    assert large.stream_interval_ms == defaults["stream_interval_ms"].default
    assert large.max_stream_responses_per_s == defaults["max_stream_responses_per_s"].default
