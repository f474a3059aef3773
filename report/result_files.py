"""Result files: every benchmark (and the fault harness, the simulator's record runs and
`switchyard gpu-check`) prints a table and writes one JSON file, `bench/results/<name>.json`,
holding `{"name": ..., "meta": {...}, "rows": [{...}, ...]}`.

The folder is the repository's `bench/results/`, where the runs of record are kept beside the
benchmarks that made them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from report.text_table import text_table

RESULTS_DIR = Path(__file__).resolve().parents[1] / "bench" / "results"


def format_table(rows: list[dict[str, Any]]) -> str:
    """Result rows as a `report.text_table` text table: columns in first-seen order, every cell
    right-aligned, floats to 3 significant digits, None blank."""
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    return text_table(columns, [[_cell(row.get(column)) for column in columns] for row in rows], align="right")


def write_result(name: str, rows: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """Write bench/results/<name>.json, print the table, and return the file's path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps({"name": name, "meta": meta, "rows": rows}, indent=2, default=str) + "\n")
    print(f"== {name} ==")
    for key, value in meta.items():
        print(f"  {key}: {value}")
    print(format_table(rows))
    print(f"-> {path}")
    return path


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)
