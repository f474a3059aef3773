from __future__ import annotations

from pathlib import Path

import pytest

from build_engines.repository import TemplateError, fill_repository, fill_template
from config.settings import SwitchyardConfig


def make_config(root: Path, *, engine_in_process: bool = False) -> SwitchyardConfig:
    return SwitchyardConfig(
        root=root,
        models={"tiny": {"weights_uri": "var/models/tiny", "max_context_tokens": 256}},  # type: ignore[dict-item]
        pools={
            "tiny": {  # type: ignore[dict-item]
                "model_id": "tiny",
                "engine": {
                    "kv_capacity_tokens": 2048,
                    "block_size": 8,
                    "enable_prefix_caching": False,
                    "long_prefill_tokens": 128,
                },
                "ports": {"http": 1, "grpc": 2, "metrics": 3},
                "engine_in_process": engine_in_process,
            }
        },
    )


def test_fills_every_model_of_the_pool(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    repo = fill_repository(config, "tiny")
    assert repo == tmp_path / "var" / "model_repository" / "tiny"
    assert sorted(p.name for p in repo.iterdir()) == ["cpu_engine", "llm", "postprocessing", "preprocessing"]
    for model in repo.iterdir():
        text = (model / "config.pbtxt").read_text()
        assert "$" not in text
        assert (model / "1" / "model.py").is_file()
    engine = (repo / "cpu_engine" / "config.pbtxt").read_text()
    assert f'string_value: "{(tmp_path / "var/models/tiny").resolve()}"' in engine
    assert 'key: "block_size", value: { string_value: "8" }' in engine
    assert 'key: "enable_prefix_caching", value: { string_value: "false" }' in engine
    assert 'key: "long_prefill_tokens", value: { string_value: "128" }' in engine
    assert 'string_value: "cpu_engine"' in (repo / "llm" / "config.pbtxt").read_text()


def test_an_engine_in_process_is_llm_s_own(tmp_path: Path) -> None:
    """No engine model: `llm` carries the engine template's parameters, each once, and says
    it hosts the engine; what Triton parses is one valid config."""
    repo = fill_repository(make_config(tmp_path, engine_in_process=True), "tiny")
    assert sorted(p.name for p in repo.iterdir()) == ["llm", "postprocessing", "preprocessing"]
    llm = (repo / "llm" / "config.pbtxt").read_text()
    assert 'key: "engine_in_process", value: { string_value: "true" }' in llm
    assert 'key: "block_size", value: { string_value: "8" }' in llm
    assert 'key: "long_prefill_tokens", value: { string_value: "128" }' in llm
    assert llm.count('key: "model_dir"') == 1  # both templates name it: kept once
    separate = (fill_repository(make_config(tmp_path / "b"), "tiny") / "llm" / "config.pbtxt").read_text()
    assert 'key: "engine_in_process"' not in separate


def test_refill_replaces_stale_files(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    repo = fill_repository(config, "tiny")
    (repo / "stale_model").mkdir()
    fill_repository(config, "tiny", overrides={"postprocessing_instances": "3"})
    assert not (repo / "stale_model").exists()
    assert "count: 3," in (repo / "postprocessing" / "config.pbtxt").read_text()


def test_unknown_pool_and_override_fail_loudly(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    with pytest.raises(KeyError, match="unknown pool"):
        fill_repository(config, "nope")
    with pytest.raises(TemplateError, match="unknown repository key 'block_sise'"):
        fill_repository(config, "tiny", overrides={"block_sise": "8"})


def test_unfilled_or_malformed_placeholders_fail() -> None:
    assert fill_template("a ${x} b", {"x": "1"}) == "a 1 b"
    with pytest.raises(TemplateError, match="no value for placeholder"):
        fill_template("a ${x} ${y}", {"x": "1"})
    with pytest.raises(TemplateError, match="malformed"):
        fill_template("a $x", {"x": "1"})
    with pytest.raises(TemplateError, match="malformed"):
        fill_template("a ${x", {"x": "1"})


def test_missing_engine_template_fails(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="no model template"):
        fill_repository(make_config(tmp_path), "tiny", templates_dir=tmp_path / "no-templates")
    assert not list((tmp_path / "var" / "model_repository").glob(".*"))  # no staging left behind
