"""The environment as typed settings (config/environment.py): what a process reads, what it
hands its children, and that nothing below an entry point reads `os.environ` itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from config.environment import SwitchyardEnvironment, environment_variables, variable_name
from gateway.settings import GatewaySettings

ROOT = Path(__file__).resolve().parents[2]


def test_each_variable_is_read_into_its_field(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "SWITCHYARD_CONFIG": "/etc/switchyard/switchyard.yaml",
        "SWITCHYARD_ADMIN_KEY": " sy-admin\n",
        "SWITCHYARD_API_KEY": "sy-team",
        "SWITCHYARD_GATEWAY_URL": "http://gateway:8000",
        "SWITCHYARD_WORKERS": "4",
        "SWITCHYARD_TRITON_ROOT": "/opt/tritonserver",
    }.items():
        monkeypatch.setenv(name, value)
    assert SwitchyardEnvironment() == SwitchyardEnvironment(
        config=Path("/etc/switchyard/switchyard.yaml"),
        admin_key="sy-admin",
        api_key="sy-team",
        gateway_url="http://gateway:8000",
        workers=4,
        triton_root=Path("/opt/tritonserver"),
    )


def test_a_blank_variable_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SWITCHYARD_ADMIN_KEY", "SWITCHYARD_TRITON_ROOT", "SWITCHYARD_WORKERS"):
        monkeypatch.setenv(name, "  ")
    environment = SwitchyardEnvironment()
    # An empty root was once truthy as Path(""), that is ".": not a Triton install.
    assert (environment.admin_key, environment.triton_root, environment.workers) == (None, None, None)


def test_a_bad_value_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_WORKERS", "0")
    with pytest.raises(ValueError, match="workers"):
        SwitchyardEnvironment()


class _Example(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EXAMPLE_", frozen=True)

    port: int | None = None
    verbose: bool = False
    tags: list[str] = []
    folder: Path | None = Field(default=None, validation_alias="THEIR_OWN_FOLDER")


def test_variable_names_follow_the_prefix_or_the_alias() -> None:
    assert variable_name(_Example, "port") == "EXAMPLE_PORT"
    assert variable_name(_Example, "folder") == "THEIR_OWN_FOLDER"
    assert variable_name(SwitchyardEnvironment, "triton_root") == "SWITCHYARD_TRITON_ROOT"


def test_settings_written_out_read_back_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    example = _Example(port=8001, verbose=True, tags=["a", "b"], THEIR_OWN_FOLDER=Path("/tmp/x"))
    variables = environment_variables(example)
    assert variables == {
        "EXAMPLE_PORT": "8001",
        "EXAMPLE_VERBOSE": "true",
        "EXAMPLE_TAGS": '["a", "b"]',
        "THEIR_OWN_FOLDER": "/tmp/x",
    }
    assert "EXAMPLE_PORT" not in environment_variables(_Example(port=None))  # unset stays unset
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert _Example() == example


def test_gateway_workers_read_the_settings_their_parent_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `gateway.server.serve` hands its uvicorn workers."""
    parent = GatewaySettings(
        config=Path("/srv/run/gateway.yaml"),
        grpc_port=8003,
        freeze_heap=True,
        workers=2,
        PROMETHEUS_MULTIPROC_DIR=Path("/srv/run/prometheus-gateway-8000"),
    )
    for name in list(GatewaySettings.model_fields):
        monkeypatch.delenv(variable_name(GatewaySettings, name), raising=False)
    for name, value in environment_variables(parent).items():
        monkeypatch.setenv(name, value)
    assert GatewaySettings() == parent


# Reads of the process environment below the entry points that are not ours to move here: each
# with its reason. Benchmarks and the fault harness are programs of their own, not scanned.
ALLOWED_READS = {
    # prometheus-client's own variable, which it reads itself when a worker imports it.
    "serving/metrics_registry.py",
    # The latency log's switch in the Triton stub, a process of Triton's making whose only
    # settings are its environment and the model's config (the gateway's: GatewaySettings).
    "bls/engine_shell.py",
    "bls/llm_model.py",
}
NOT_SCANNED = {"config", "tests", "bench", "faults", "model_repository", "var", "deploy", "docs"}


def environment_reads(source: str) -> list[int]:
    """Lines that read `os.environ` / `os.getenv`. Not reads: writes (`os.environ[k] = v`,
    `os.environ.update`), and a child's environment made from this one (`{**os.environ, ...}`,
    `dict(os.environ ...)`): it inherits the variables without this process reading them."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            if node.attr == "getenv":
                lines.append(node.lineno)
            if node.attr != "environ":
                continue
            parent = parents.get(node)
            if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store):
                continue
            if isinstance(parent, ast.Attribute) and parent.attr == "update":
                continue
            if isinstance(parent, ast.Dict) and parent.keys[parent.values.index(node)] is None:  # {**os.environ}
                continue
            if isinstance(parent, ast.IfExp):
                parent = parents.get(parent)
            if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "dict":
                continue
            lines.append(node.lineno)
    return sorted(lines)


def test_the_reader_tells_reads_from_writes_and_inheritance() -> None:
    source = """import os
a = os.environ.get("A")
b = os.getenv("B")
c = os.environ["C"]
os.environ["D"] = "1"
os.environ.update(E="1")
child = {**os.environ, "F": "1"}
copied = dict(os.environ if base is None else base)
g = os.environ
"""
    assert environment_reads(source) == [2, 3, 4, 9]


def test_nothing_below_the_entry_points_reads_the_environment_but_config() -> None:
    found = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in NOT_SCANNED or relative.parts[0].startswith(".") or str(relative) in ALLOWED_READS:
            continue
        found += [f"{relative}:{line}" for line in environment_reads(path.read_text())]
    assert found == [], "read these through config/environment.py and pass them in:\n" + "\n".join(found)
