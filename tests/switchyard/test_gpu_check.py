"""`switchyard gpu-check`'s prerequisite checks, run as real processes: a PATH without
`nvidia-smi`, a stand-in `nvidia-smi` script for a GPU this machine lacks, a stand-in
`tensorrt_llm` package on PYTHONPATH for the library it lacks."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from build_engines.trtllm_pin import KV_CACHE_CONFIG_KEYS, LLM_API_KEYS, SCHEDULER_CONFIG_KEYS, TRTLLM_VERSION
from config.settings import SwitchyardConfig, load_config
from switchyard.gpu_check import (
    add_gpu_check_parser,
    check_gpus,
    check_llm_api_pin,
    check_prerequisites,
    check_tensorrt_llm,
    check_tritonserver,
    gpu_check,
    run_in_checkout,
)

CONFIG = """
models:
  small: {weights_uri: models/small, max_context_tokens: 64}
pools:
  small: {model_id: small, ports: {http: 9101, grpc: 9102, metrics: 9103}}
"""
H200 = "GPU 0: NVIDIA H200 (UUID: GPU-5e7c1c3a-0000-0000-0000-000000000000)"


def executable(path: Path, script: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return path


def runner(**env: str) -> functools.partial[subprocess.CompletedProcess[str]]:
    """`subprocess.run` in environment `env` alone (PATH included)."""
    return functools.partial(subprocess.run, capture_output=True, text=True, env=env, check=False)


@pytest.fixture
def config(tmp_path: Path) -> SwitchyardConfig:
    path = tmp_path / "switchyard.yaml"
    path.write_text(CONFIG)
    return load_config(path)


def test_nvidia_smi_missing_from_path(tmp_path: Path) -> None:
    result = check_gpus(runner(PATH=str(tmp_path)))
    assert not result.ok
    assert "not found on PATH" in result.detail


def test_nvidia_smi_without_a_device(tmp_path: Path) -> None:
    # What nvidia-smi says when the driver is there and no GPU is visible.
    executable(tmp_path / "nvidia-smi", "echo 'No devices were found'; exit 6")
    result = check_gpus(runner(PATH=str(tmp_path)))
    assert not result.ok
    assert result.detail == "exited with code 6: No devices were found"


def test_nvidia_smi_listing_no_gpu(tmp_path: Path) -> None:
    executable(tmp_path / "nvidia-smi", "exit 0")
    result = check_gpus(runner(PATH=str(tmp_path)))
    assert (result.ok, result.detail) == (False, "lists no GPU")


def test_nvidia_smi_listing_gpus(tmp_path: Path) -> None:
    second = H200.replace("GPU 0", "GPU 1")
    executable(tmp_path / "nvidia-smi", f"echo '{H200}'; echo '{second}'")
    result = check_gpus(runner(PATH=str(tmp_path)))
    assert (result.ok, result.detail) == (True, f"{H200}; {second}")


@pytest.mark.skipif(importlib.util.find_spec("tensorrt_llm") is not None, reason="tensorrt_llm is installed here")
def test_tensorrt_llm_missing() -> None:
    result = check_tensorrt_llm()
    assert not result.ok
    assert result.detail == f"import failed in {sys.executable}: ModuleNotFoundError: No module named 'tensorrt_llm'"


def fake_tensorrt_llm(site: Path, body: str) -> Path:
    package = site / "tensorrt_llm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(body)
    return site


def test_tensorrt_llm_import_failing(tmp_path: Path) -> None:
    site = fake_tensorrt_llm(tmp_path, "raise ImportError('libcuda.so.1: cannot open shared object file')\n")
    result = check_tensorrt_llm(runner(PYTHONPATH=str(site)))
    assert not result.ok
    assert result.detail.endswith("ImportError: libcuda.so.1: cannot open shared object file")


def test_tensorrt_llm_version_after_its_banner(tmp_path: Path) -> None:
    # The real package prints a banner on import; the version is the last line.
    site = fake_tensorrt_llm(tmp_path, "print('[TensorRT-LLM] TensorRT-LLM version: 1.0.0')\n__version__ = '1.0.0'\n")
    result = check_tensorrt_llm(runner(PYTHONPATH=str(site)))
    assert (result.ok, result.detail) == (True, "version 1.0.0")


def test_tritonserver_missing(tmp_path: Path) -> None:
    which = functools.partial(shutil.which, path=str(tmp_path))
    result = check_tritonserver(which, fallbacks=[tmp_path / "opt" / "tritonserver"])
    assert not result.ok
    assert str(tmp_path / "opt" / "tritonserver") in result.detail


def test_tritonserver_on_path_then_at_a_fallback(tmp_path: Path) -> None:
    fallback = executable(tmp_path / "opt" / "bin" / "tritonserver", "exit 0")
    which = functools.partial(shutil.which, path=str(tmp_path / "bin"))
    assert check_tritonserver(which, fallbacks=[fallback]).detail == str(fallback)
    on_path = executable(tmp_path / "bin" / "tritonserver", "exit 0")
    assert check_tritonserver(which, fallbacks=[fallback]).detail == str(on_path)


def stand_in_llm_api(site: Path, llm_keys: Iterable[str]) -> None:
    """`tensorrt_llm.llmapi` with the field lists the pin check reads (pydantic models upstream)."""
    llmapi = site / "tensorrt_llm" / "llmapi"
    llmapi.mkdir()

    def model(name: str, keys: Iterable[str]) -> str:
        return f"class {name}:\n    model_fields = dict.fromkeys({sorted(keys)!r})\n"

    (llmapi / "__init__.py").write_text(
        model("KvCacheConfig", KV_CACHE_CONFIG_KEYS) + model("SchedulerConfig", SCHEDULER_CONFIG_KEYS)
    )
    (llmapi / "llm_args.py").write_text(model("TorchLlmArgs", llm_keys))


def test_all_prerequisites_present(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    executable(bin_dir / "nvidia-smi", f"echo '{H200}'")
    executable(bin_dir / "tritonserver", "exit 0")
    site = fake_tensorrt_llm(tmp_path / "site", "__version__ = '1.2.0rc1'\n")
    stand_in_llm_api(site, (LLM_API_KEYS - {"backend"}) | {"garbage_collection_gen0_threshold"})
    run = runner(PATH=str(bin_dir), PYTHONPATH=str(site))
    results = check_prerequisites(run, functools.partial(shutil.which, path=str(bin_dir)))
    pinned = len(LLM_API_KEYS) + len(KV_CACHE_CONFIG_KEYS) + len(SCHEDULER_CONFIG_KEYS)
    assert [(p.name, p.ok, p.detail) for p in results] == [
        ("nvidia-smi", True, H200),
        ("tensorrt_llm", True, "version 1.2.0rc1"),
        ("tritonserver", True, str(bin_dir / "tritonserver")),
        ("LLM API keys", True, f"all {pinned} pinned keys exist (pin {TRTLLM_VERSION})"),
    ]


def test_a_pinned_key_the_installed_release_lacks_is_named(tmp_path: Path) -> None:
    site = fake_tensorrt_llm(tmp_path / "site", "__version__ = '1.0.0'\n")
    stand_in_llm_api(site, LLM_API_KEYS - {"enable_iter_perf_stats", "backend"})
    result = check_llm_api_pin(runner(PYTHONPATH=str(site)))
    assert not result.ok
    assert result.detail == "pinned keys the installed release lacks: llm.enable_iter_perf_stats"


def test_gpu_check_exits_2_naming_what_is_missing(
    config: SwitchyardConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi, whatever this machine has
    args = argparse.Namespace(engine="llmapi", skip_build=False)
    assert gpu_check(config, args) == 2
    captured = capsys.readouterr()
    assert "nvidia-smi" in captured.err.split("missing prerequisites:")[1]
    assert not (tmp_path / "models" / "small").exists()  # nothing was built


def test_gpu_check_with_every_prerequisite_stops_at_an_unbuilt_model(
    config: SwitchyardConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default checks, through this process's PATH and PYTHONPATH, pass; --skip-build with
    no model built ends the check before any server starts."""
    bin_dir = tmp_path / "bin"
    executable(bin_dir / "nvidia-smi", f"echo '{H200}'")
    executable(bin_dir / "tritonserver", "exit 0")
    monkeypatch.setenv("PATH", str(bin_dir))
    site = fake_tensorrt_llm(tmp_path / "site", "__version__ = '1.0.0'\n")
    stand_in_llm_api(site, LLM_API_KEYS)
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert gpu_check(config, argparse.Namespace(engine="llmapi", skip_build=True)) == 2
    captured = capsys.readouterr()
    assert "tensorrt_llm  ok  version 1.0.0" in captured.out
    assert "holds no built model" in captured.err


def test_gpu_check_runs_the_benchmarks_as_a_process_with_what_it_found(
    config: SwitchyardConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the prerequisites, `python -m bench gpu` gets the engine, the configuration file and
    what the checks found; its exit code is the check's. Its live runs (minutes, on an engine
    this machine lacks) are stood in for (tests/bench/test_bench_gpu.py runs its half)."""
    bin_dir = tmp_path / "bin"
    executable(bin_dir / "nvidia-smi", f"echo '{H200}'")
    executable(bin_dir / "tritonserver", "exit 0")
    monkeypatch.setenv("PATH", str(bin_dir))
    site = fake_tensorrt_llm(tmp_path / "site", "__version__ = '1.0.0'\n")
    stand_in_llm_api(site, LLM_API_KEYS)
    monkeypatch.setenv("PYTHONPATH", str(site))
    (config.model_dir("small") / "tokenizer.json").parent.mkdir(parents=True)
    (config.model_dir("small") / "tokenizer.json").write_text("{}")
    runs: list[list[str]] = []

    def run_bench(argv: Sequence[str]) -> int:
        runs.append(list(argv))
        return 1  # a target missed

    args = argparse.Namespace(engine="legacy", skip_build=True, config=tmp_path / "switchyard.yaml")
    assert gpu_check(config, args, run_bench) == 1
    (argv,) = runs
    assert argv[:6] == [sys.executable, "-m", "bench", "gpu", "--engine", "legacy"]
    assert argv[-2:] == ["--config", str(tmp_path / "switchyard.yaml")]
    meta = json.loads(argv[argv.index("--meta") + 1])
    assert (meta["nvidia-smi"], meta["tensorrt_llm"]) == (H200, "version 1.0.0")


def test_the_benchmarks_run_from_the_checkout_though_not_installed() -> None:
    """bench/ is left out of the wheel (pyproject.toml): the command gpu-check runs still finds
    it, from the checkout's root (`CHECKOUT`), whatever the caller's working directory."""
    assert run_in_checkout([sys.executable, "-m", "bench", "gpu", "--help"]) == 0


def test_gpu_check_needs_the_small_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "switchyard.yaml"
    path.write_text(CONFIG.replace("small:", "tiny:").replace("model_id: small", "model_id: tiny"))
    assert gpu_check(load_config(path), argparse.Namespace(engine="llmapi", skip_build=True)) == 2
    assert "need a model and pool named 'small'" in capsys.readouterr().err


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="switchyard")
    add_gpu_check_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_parser_defaults_and_options() -> None:
    defaults = parse(["gpu-check"])
    assert (defaults.engine, defaults.skip_build) == ("llmapi", False)
    given = parse(["gpu-check", "--engine", "legacy", "--skip-build"])
    assert (given.engine, given.skip_build) == ("legacy", True)
    with pytest.raises(SystemExit):
        parse(["gpu-check", "--engine", "vllm"])
