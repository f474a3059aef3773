"""The images' Dockerfiles copy every package the project installs (a package added to
pyproject.toml but not to a Dockerfile would be missing only inside the cluster)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((REPO / "deploy" / "docker").glob("Dockerfile*"))


def installed_packages() -> set[str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return {pattern.rstrip("*") for pattern in patterns}


def test_there_is_a_cpu_and_a_gpu_image() -> None:
    assert [path.name for path in DOCKERFILES] == ["Dockerfile", "Dockerfile.gpu"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_every_package_and_the_templates_are_copied(dockerfile: Path) -> None:
    copied = set(re.findall(r"^COPY (\S+) \1$", dockerfile.read_text(), flags=re.MULTILINE))
    assert installed_packages() | {"model_repository"} <= copied
    assert (REPO / "model_repository").is_dir()


def test_the_gpu_image_serves_with_its_own_triton() -> None:
    text = (REPO / "deploy" / "docker" / "Dockerfile.gpu").read_text()
    assert re.search(r"^FROM nvcr\.io/nvidia/tritonserver:\$\{NGC_TAG\}-trtllm-python-py3$", text, re.MULTILINE)
    assert "SWITCHYARD_TRITON_ROOT=/opt/tritonserver" in text


def test_the_gpu_image_carries_the_benchmarks_gpu_check_runs() -> None:
    """`switchyard gpu-check` runs `python -m bench gpu` from the checkout its module sits in: in
    the GPU image /app, on PYTHONPATH. The benchmarks and the fault harness their command line
    imports are not in the wheel, so that image copies them (the CPU image needs neither)."""
    text = (REPO / "deploy" / "docker" / "Dockerfile.gpu").read_text()
    copied = set(re.findall(r"^COPY (\S+) \1$", text, flags=re.MULTILINE))
    assert {"bench", "faults"} <= copied
    assert re.search(r"^WORKDIR /app$", text, re.MULTILINE) and "PYTHONPATH=/app" in text
    assert not {"bench", "faults"} & installed_packages()
