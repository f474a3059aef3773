"""`python -m bench gpu`, the benchmark half of `switchyard gpu-check`: S1, S3 and S4 on
TensorRT-LLM, their headline figures against their targets in one result file. Their live runs
(minutes, on an engine this machine lacks) are stood in for by results shaped as theirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import report.result_files
from bench.bench_gpu import GPU_STARTUP_S, run, trtllm_config
from config.settings import SwitchyardConfig, load_config

CONFIG = """
models:
  small: {weights_uri: models/small, max_context_tokens: 64}
pools:
  small: {model_id: small, ports: {http: 9101, grpc: 9102, metrics: 9103}}
"""
RESULTS = {
    "s1": {"rows": [], "meta": {"ratio": 1.2, "target": 2.0}},
    "s3": {
        "rows": [{"prefill": "chunked", "ratio": 2.0}, {"prefill": "unchunked", "ratio": 40.0}],
        "meta": {"target_ratio_chunked": 3.0},
    },
    "s4": {
        "rows": [],
        "meta": {
            "ttft_warm_over_cold": 0.5,  # misses <= 0.2
            "target_ttft_ratio": 0.2,
            "on_holder_share": 0.95,
            "target_share": 0.9,
            "random_on_holder_share": 0.3,
        },
    },
}


@pytest.fixture
def config(tmp_path: Path) -> SwitchyardConfig:
    path = tmp_path / "switchyard.yaml"
    path.write_text(CONFIG)
    return load_config(path)


def test_runs_s1_s3_s4_on_trtllm_and_tables_their_figures(
    config: SwitchyardConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(report.result_files, "RESULTS_DIR", tmp_path / "results")
    runs: list[tuple[list[str], SwitchyardConfig]] = []

    def live(names: list[str], base: SwitchyardConfig) -> dict[str, dict[str, object]]:
        runs.append((names, base))
        return RESULTS  # type: ignore[return-value]

    assert run(config, "legacy", {"tensorrt_llm": "version 1.0.0"}, live) == 1
    ((names, base),) = runs
    assert names == ["s1", "s3", "s4"]
    assert (base.serving.target, base.serving.trtllm_engine) == ("trtllm", "legacy")
    written = json.loads((tmp_path / "results" / "gpu_check.json").read_text())
    assert written["meta"] == {"tensorrt_llm": "version 1.0.0", "serving": "trtllm (legacy)"}
    assert [(row["bench"], row["value"], row["met"]) for row in written["rows"]] == [
        ("s1", 1.2, "yes"),
        ("s3", 2.0, "yes"),
        ("s3", 40.0, None),
        ("s4", 0.5, "no"),
        ("s4", 0.95, "yes"),
        ("s4", 0.3, None),
    ]
    assert "targets missed: s4: TTFT p50" in capsys.readouterr().err


def test_a_failed_benchmark_is_a_failed_check(
    config: SwitchyardConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(report.result_files, "RESULTS_DIR", tmp_path / "results")

    def live(names: list[str], base: SwitchyardConfig) -> dict[str, dict[str, object]]:
        raise RuntimeError("tritonserver did not start")

    assert run(config, "llmapi", {}, live) == 1
    assert "the benchmarks failed on trtllm (llmapi)" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_trtllm_config_changes_only_serving_and_the_startup_time(config: SwitchyardConfig) -> None:
    changed = trtllm_config(config, "legacy")
    assert (changed.serving.target, changed.serving.trtllm_engine) == ("trtllm", "legacy")
    assert changed.fleet.startup_timeout_s == GPU_STARTUP_S > config.fleet.startup_timeout_s
    assert config.serving.target == "cpu"
    assert changed.model_dump(exclude={"serving", "fleet"}) == config.model_dump(exclude={"serving", "fleet"})
