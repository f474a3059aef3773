"""`pip install .` serves without the extras: nothing the gateway, the servers, the supervisor,
the autoscaler's live loop, the dispatcher or the stack import needs matplotlib (the `sim`
extra) or the Kubernetes client (the `kubernetes` extra); and the CLI says which extra to
install when a command needs one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]

SERVING = [
    "gateway.app",
    "gateway.server",
    "server_host.server_process",
    "supervisor.supervisor_thread",
    "autoscaler.live",
    "autoscaler.autoscaler_thread",
    "bulk.service",
    "stack.local_stack",
    "switchyard.cli",
]


def test_the_extras_are_not_core_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    assert "matplotlib" not in core and "kubernetes" not in core
    assert any("matplotlib" in dep for dep in project["optional-dependencies"]["sim"])
    assert any("kubernetes" in dep for dep in project["optional-dependencies"]["kubernetes"])


def test_serving_modules_import_neither_extra() -> None:
    code = (
        f"import importlib, sys\nfor name in {SERVING!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in ('matplotlib', 'kubernetes') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_sim_without_its_extra_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from config.settings import load_config
    from switchyard.sim_commands import add_sim_parser, sim

    for name in [
        m for m in sys.modules if m.startswith(("simulator.report", "simulator.plots", "simulator.latency_plot"))
    ]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    parser = argparse.ArgumentParser()
    add_sim_parser(parser.add_subparsers())
    args = parser.parse_args(["sim", "weekday", "--gpus", "4", "--hours", "0.02", "--out", str(tmp_path)])
    assert sim(load_config(), args) == 2
    assert "pip install '.[sim]'" in capsys.readouterr().err
