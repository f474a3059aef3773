"""The headline figures of live benchmarks S1, S3 and S4, each against its target, as the rows
of one table (`python -m bench gpu`, for `switchyard gpu-check`, prints and writes it).

Each figure is read from the result a benchmark's `run` returns ({"rows": [...], "meta": {...}},
also bench/results/<name>.json), targets included, so a target changed in a benchmark changes
here too. A result without a figure it should hold raises ValueError rather than leave a row out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Target:
    """A figure's bound: at most `bound` (`at_most`) or at least it."""

    bound: float
    at_most: bool

    def met_by(self, value: float) -> bool:
        return value <= self.bound if self.at_most else value >= self.bound

    def __str__(self) -> str:
        return f"{'<=' if self.at_most else '>='} {self.bound:g}"


@dataclass(frozen=True, slots=True)
class Headline:
    """One benchmark's figure; `value` is None when the run produced none (S4 with no warm
    request has no warm/cold ratio)."""

    bench: str
    figure: str
    value: float | None
    target: Target | None = None

    @property
    def met(self) -> bool | None:
        """None for a figure without a target; False for a missing figure that has one."""
        if self.target is None:
            return None
        return self.value is not None and self.target.met_by(self.value)

    def row(self) -> dict[str, object]:
        """The headline as a row of `report.result_files.format_table`: None prints as a blank."""
        target = None if self.target is None else str(self.target)
        met = {True: "yes", False: "no", None: None}[self.met]
        return {"bench": self.bench, "figure": self.figure, "value": self.value, "target": target, "met": met}


def headlines(results: Mapping[str, Mapping[str, object]]) -> list[Headline]:
    """The headline figures of the benchmarks in `results` (name -> result, as
    `bench.live_runs.run_live` returns), S1, S3, S4 in that order; other names have none."""
    readers: dict[str, Callable[[Mapping[str, object]], list[Headline]]] = {"s1": _s1, "s3": _s3, "s4": _s4}
    return [headline for name, read in readers.items() if name in results for headline in read(results[name])]


def _s1(result: Mapping[str, object]) -> list[Headline]:
    meta = _meta(result)
    target = Target(_number(meta, "target"), at_most=True)
    return [Headline("s1", "short reply e2e: behind long replies / idle", _figure(meta, "ratio"), target)]


def _s3(result: Mapping[str, object]) -> list[Headline]:
    by_prefill = {row.get("prefill"): row for row in _rows(result)}
    target = Target(_number(_meta(result), "target_ratio_chunked"), at_most=True)
    figure = "p99 gap between deltas: during a document's prefill / before"
    return [
        Headline("s3", f"{figure}, chunked", _figure(_row(by_prefill, "chunked"), "ratio"), target),
        Headline("s3", f"{figure}, unchunked", _figure(_row(by_prefill, "unchunked"), "ratio")),
    ]


def _s4(result: Mapping[str, object]) -> list[Headline]:
    meta = _meta(result)
    return [
        Headline(
            "s4",
            "TTFT p50 of a shared prefix: warm / cold",
            _figure(meta, "ttft_warm_over_cold"),
            Target(_number(meta, "target_ttft_ratio"), at_most=True),
        ),
        Headline(
            "s4",
            "routed requests on a server holding their prefix",
            _figure(meta, "on_holder_share"),
            Target(_number(meta, "target_share"), at_most=False),
        ),
        Headline("s4", "random requests on a server holding their prefix", _figure(meta, "random_on_holder_share")),
    ]


def _meta(result: Mapping[str, object]) -> Mapping[str, object]:
    meta = result.get("meta")
    if not isinstance(meta, Mapping):
        raise ValueError(f"a benchmark result without meta: {sorted(result)}")
    return meta


def _rows(result: Mapping[str, object]) -> list[Mapping[str, object]]:
    rows = result.get("rows")
    if not isinstance(rows, list) or not all(isinstance(row, Mapping) for row in rows):
        raise ValueError("a benchmark result without a list of rows")
    return rows


def _row(rows: Mapping[object, Mapping[str, object]], key: str) -> Mapping[str, object]:
    if key not in rows:
        raise ValueError(f"no row {key!r} among {sorted(map(str, rows))}")
    return rows[key]


def _figure(values: Mapping[str, object], key: str) -> float | None:
    """`values[key]` as a float; None when it is None (the run had no such figure)."""
    if key not in values:
        raise ValueError(f"no {key!r} among {sorted(values)}")
    value = values[key]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key!r} is {value!r}, not a number")
    return float(value)


def _number(values: Mapping[str, object], key: str) -> float:
    """`values[key]`, which must be a number (a target)."""
    value = _figure(values, key)
    if value is None:
        raise ValueError(f"{key!r} is None, not a number")
    return value
