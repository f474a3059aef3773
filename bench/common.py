"""Shared output for benchmarks: every benchmark prints a table and writes one JSON file,
`bench/results/<name>.json`, holding `{"name": ..., "meta": {...}, "rows": [{...}, ...]}`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def format_table(rows: list[dict[str, Any]]) -> str:
    """Rows as an aligned text table; columns in first-seen order, floats to 3 significant digits."""
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    widths = [max([len(column), *(len(line[i]) for line in cells)]) for i, column in enumerate(columns)]
    lines = ["  ".join(column.ljust(width) for column, width in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * width for width in widths))
    lines.extend("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)) for line in cells)
    return "\n".join(lines)


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
