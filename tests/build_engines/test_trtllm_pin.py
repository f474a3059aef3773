"""The TensorRT-LLM pin: its version is written in one place, and the legacy TensorRT-engine path
is built only while the pinned release still has that backend (upstream removed it in July
2026)."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

import build_engines.trtllm_pin
from build_engines.legacy_engine import build_script, legacy_values, write_build_script
from build_engines.llm_api_args import pool_plan
from build_engines.repository import fill_repository
from build_engines.trtllm_pin import (
    PINNED_RELEASE,
    TRTLLM_VERSION,
    LegacyEngineUnavailable,
    TrtllmRelease,
    require_tensorrt_engine_backend,
)
from config.settings import ServingSpec, SwitchyardConfig, load_config

ROOT = Path(__file__).resolve().parents[2]
PIN_FILE = Path(build_engines.trtllm_pin.__file__).resolve()
TEXT_SUFFIXES = {".py", ".md", ".pbtxt", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".txt", ".json"}
SKIPPED_DIRS = {".git", ".venv", "var", "__pycache__", "node_modules", "tests", "results"}
# A line about TensorRT-LLM or the pin: where a version number would be a copy of the pin's.
TRTLLM_CONTEXT = re.compile(r"TensorRT|tensorrt|trtllm|TRTLLM|TRT-LLM|\bpin\b|pinned|LLM API|generate_async")
# A release without its TensorRT engine backend: what the pin becomes when it moves past July 2026.
WITHOUT_ENGINES = TrtllmRelease(version="9.9.0", has_tensorrt_engine_backend=False, supports_priority=True)


def pinned_version_pattern(version: str) -> re.Pattern[str]:
    """The pinned release line as it appears in prose: `1.2`, `1.2.0`, `<= 1.2`, `1.2's`, but
    not `41.2`, `1.25`, `1.2x` or `1.2%`."""
    line = ".".join(version.split(".")[:2])
    return re.compile(rf"(?<![\d.]){re.escape(line)}(?:\.\d+)*(?:rc\d+)?(?![\d×x%])")


def repository_text_files() -> list[Path]:
    """Every text file of the repository but the tests' own (walked with the virtualenv, run
    output and build metadata pruned)."""
    files = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [name for name in dirs if name not in SKIPPED_DIRS and not name.endswith(".egg-info")]
        for name in names:
            if Path(name).suffix in TEXT_SUFFIXES or name == "Makefile" or name.startswith("Dockerfile"):
                files.append(Path(folder) / name)
    return files


def test_the_pinned_version_is_written_only_in_the_pin() -> None:
    """Docs, comments, help texts, Dockerfiles and the Makefile say "the pinned release" and
    point at build_engines/trtllm_pin.py; a copy of the number would stay behind when it moves."""
    version = pinned_version_pattern(TRTLLM_VERSION)
    copies = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in repository_text_files()
        if path.resolve() != PIN_FILE
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if TRTLLM_CONTEXT.search(line) and version.search(line)
    ]
    assert not copies, "the pinned TensorRT-LLM version copied outside the pin:\n" + "\n".join(copies)


def test_the_pin_module_holds_one_version_number() -> None:
    tree = ast.parse(PIN_FILE.read_text())
    versions = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if re.fullmatch(r"\d+\.\d+(?:\.\d+)*(?:rc\d+)?", node.value)
    ]
    assert versions == [TRTLLM_VERSION]
    assert PINNED_RELEASE.version == TRTLLM_VERSION


@pytest.mark.parametrize(
    ("version", "prose", "found"),
    [
        ("1.2.0", "TensorRT-LLM <= 1.2", True),
        ("1.2.0", "the pin (build_engines/trtllm_pin.py, 1.2)", True),
        ("1.2.0", "TensorRT-LLM 1.2's LLM API", True),
        ("1.2.0", "tensorrt_llm 1.2.0rc1", True),
        ("1.2.0", "takes priority from TensorRT-LLM 1.3 on", False),
        ("1.2.0", "TensorRT-LLM 41.2 or 1.25", False),
    ],
)
def test_the_version_pattern_finds_the_pinned_line_only(version: str, prose: str, found: bool) -> None:
    assert bool(TRTLLM_CONTEXT.search(prose) and pinned_version_pattern(version).search(prose)) is found


def legacy_config(tmp_path: Path) -> SwitchyardConfig:
    config = load_config()
    models = {
        model_id: model.model_copy(update={"weights_uri": str(config.model_dir(model_id).resolve())})
        for model_id, model in config.models.items()
    }
    serving = ServingSpec(target="trtllm", trtllm_engine="legacy")
    return config.model_copy(update={"var_dir": str(tmp_path / "var"), "models": models, "serving": serving})


def test_the_pinned_release_still_builds_the_legacy_engine(tmp_path: Path) -> None:
    config = legacy_config(tmp_path)
    require_tensorrt_engine_backend(PINNED_RELEASE)
    repo = fill_repository(config, "small")
    assert 'backend: "tensorrtllm"' in (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    script = build_script(config, "small", pool_plan(config, "small"))
    assert "LEGACY" in script and f"TensorRT-LLM {TRTLLM_VERSION} only" in script


def test_a_release_without_tensorrt_engines_refuses_every_legacy_entry_point(tmp_path: Path) -> None:
    config = legacy_config(tmp_path)
    plan = pool_plan(config, "small")
    with pytest.raises(LegacyEngineUnavailable, match=r"9\.9\.0 .*has no TensorRT engine backend.*llmapi"):
        fill_repository(config, "small", release=WITHOUT_ENGINES)
    assert not config.pool_repository("small").exists()  # nothing half-written was swapped in
    with pytest.raises(LegacyEngineUnavailable):
        legacy_values(config, "small", plan, WITHOUT_ENGINES)
    with pytest.raises(LegacyEngineUnavailable):
        write_build_script(config, "small", plan, WITHOUT_ENGINES)
    assert not (config.var_path / "engines").exists()


def test_the_llm_api_path_needs_no_tensorrt_engines(tmp_path: Path) -> None:
    """Moving the pin past the removal leaves the default path as it is."""
    config = legacy_config(tmp_path).model_copy(update={"serving": ServingSpec(target="trtllm")})
    assert config.serving.trtllm_engine == "llmapi"
    repo = fill_repository(config, "small", release=WITHOUT_ENGINES)
    assert (repo / "tensorrt_llm" / "model.yaml").is_file()
