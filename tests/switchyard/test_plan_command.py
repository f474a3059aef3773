"""`switchyard plan MODEL` through `main()` with a temporary switchyard.yaml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from switchyard.cli import main

CONFIG = """
models:
  small:
    weights_uri: models/small
    max_context_tokens: 64
    weights_gb: 40
    architecture: {hidden_size: 64, intermediate_size: 192, num_hidden_layers: 2,
                   num_attention_heads: 4, num_key_value_heads: 2, vocab_size: 2048}
  opaque: {weights_uri: models/opaque, max_context_tokens: 64, weights_gb: 40}
  brief: {weights_uri: models/brief, max_context_tokens: 64, weights_gb: 40, kv_bytes_per_token: 500000}
pools:
  small: {model_id: small, ports: {http: 9101, grpc: 9102, metrics: 9103}}
gpu: {memory_gb: 80, runtime_reserve_gb: 0, kv_memory_fraction: 1}
"""


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "switchyard.yaml"
    path.write_text(CONFIG)
    return path


def rows(out: str) -> dict[str, str]:
    """quantity -> value, from the printed table."""
    table: dict[str, str] = {}
    for line in out.splitlines()[1:]:
        quantity, value, _working = re.split(r"\s{2,}", line.strip(), maxsplit=2)
        table[quantity] = value
    return table


def test_plan_derives_kv_bytes_from_the_architecture(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_path), "plan", "small"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["quantity", "value", "working"]
    table = rows(out)
    # 2 layers x 2 KV heads x (64 / 4) x 2 x 2 bytes = 256 B; 40 GB / 256 B = 156,250,000 tokens.
    assert table["KV per token"] == "256 B"
    assert table["KV tokens per copy"] == "156,250,000"
    assert table["max_batch_size"] == "2,048"


def test_plan_reproduces_the_brief(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_path), "plan", "brief"]) == 0
    table = rows(capsys.readouterr().out)
    assert table["free after weights"] == "40 GB"
    assert table["KV tokens per copy"] == "80,000"
    assert table["requests per copy"] == "34.8"
    assert table["max_batch_size"] == "40"
    assert table["max_num_tokens"] == "2,048"


def test_command_line_overrides_the_config(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--config", str(config_path), "plan", "opaque", "--kv-bytes-per-token", "500000"]
    argv += ["--gpu-memory-gb", "141", "--weights-gb", "140", "--gpus-per-copy", "2", "--avg-reply-tokens", "700"]
    assert main(argv) == 0
    table = rows(capsys.readouterr().out)
    # 141 - 70 = 71 GB a GPU, x 2 GPUs / 0.5 MB = 284,000 tokens; / (2,000 + 700) = 105.2 requests.
    assert table["KV tokens per copy"] == "284,000"
    assert table["average request"] == "2,700 tokens"
    assert table["requests per copy"] == "105.2"


def test_unknown_sizes_and_models_are_errors(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_path), "plan", "opaque"]) == 2
    assert "--kv-bytes-per-token" in capsys.readouterr().err
    assert main(["--config", str(config_path), "plan", "nope"]) == 2
    assert "unknown model 'nope'" in capsys.readouterr().err
    assert main(["--config", str(config_path), "plan", "brief", "--weights-gb", "81"]) == 2
    assert "nothing is left" in capsys.readouterr().err


def test_the_repository_config_still_loads_and_plans(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "large"]) == 0
    assert "max_num_tokens" in capsys.readouterr().out
