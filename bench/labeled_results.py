"""Results kept side by side under labels in one file, so a run after a change adds to the run
before it instead of replacing it:

    bench/results/<name>.json = {"name": ..., "runs": {"before": {...}, "after": {...}}}

A file still in the one-run layout of report/result_files.py (`{"name", "meta", "rows"}`) is kept as
the run `legacy`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LEGACY = "legacy"


def read_runs(path: Path) -> dict[str, Any]:
    """The labelled runs in `path`; {} when there is no such file."""
    if not path.exists():
        return {}
    stored = json.loads(path.read_text())
    if "runs" in stored:
        runs: dict[str, Any] = stored["runs"]
        return runs
    return {LEGACY: {key: value for key, value in stored.items() if key != "name"}}


def write_run(path: Path, name: str, label: str, run: dict[str, Any]) -> Path:
    """Store `run` as `label` in `path` (replacing a run of that label only), keep the others."""
    runs = read_runs(path)
    runs[label] = run
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": name, "runs": runs}, indent=2, default=str) + "\n")
    return path
