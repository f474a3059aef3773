"""The headline table `switchyard gpu-check` prints: figures and targets read from the results
of S1, S3 and S4 (shaped as their `run` returns them), met or not."""

from __future__ import annotations

import re

import pytest

from bench.headlines import Headline, Target, headlines
from report.result_files import format_table

S1: dict[str, object] = {
    "rows": [{"case": "idle server", "short_e2e_ms": 40.0}],
    "meta": {"ratio": 1.5, "target": 2.0, "engine_only": "skipped: serving.target is trtllm"},
}
S3_CHUNKED: dict[str, object] = {
    "prefill": "chunked",
    "p99_gap_before_ms": 10.0,
    "p99_gap_during_ms": 25.0,
    "ratio": 2.5,
}
S3_UNCHUNKED: dict[str, object] = {
    "prefill": "unchunked",
    "p99_gap_before_ms": 10.0,
    "p99_gap_during_ms": 900.0,
    "ratio": 90.0,
}
S3: dict[str, object] = {"rows": [S3_CHUNKED, S3_UNCHUNKED], "meta": {"target_ratio_chunked": 3.0}}
S4_META: dict[str, object] = {
    "ttft_warm_over_cold": 0.35,
    "target_ttft_ratio": 0.2,
    "on_holder_share": 0.96,
    "target_share": 0.9,
    "random_on_holder_share": 0.3,
}
S4: dict[str, object] = {"rows": [], "meta": S4_META}


def test_one_row_per_figure_in_bench_order() -> None:
    rows = [h.row() for h in headlines({"s4": S4, "s1": S1, "s3": S3, "s2": {"rows": [], "meta": {}}})]
    assert [(r["bench"], r["value"], r["target"], r["met"]) for r in rows] == [
        ("s1", 1.5, "<= 2", "yes"),
        ("s3", 2.5, "<= 3", "yes"),
        ("s3", 90.0, None, None),
        ("s4", 0.35, "<= 0.2", "no"),
        ("s4", 0.96, ">= 0.9", "yes"),
        ("s4", 0.3, None, None),
    ]


def test_the_table_prints_with_blanks_for_no_target() -> None:
    table = format_table([h.row() for h in headlines({"s3": S3})]).splitlines()
    assert table[0].split() == ["bench", "figure", "value", "target", "met"]
    figure = "p99 gap between deltas: during a document's prefill / before"
    assert re.split(r"\s{2,}", table[2].strip()) == ["s3", f"{figure}, chunked", "2.5", "<= 3", "yes"]
    assert re.split(r"\s{2,}", table[3].strip()) == ["s3", f"{figure}, unchunked", "90"]


def test_a_missing_figure_misses_its_target() -> None:
    no_warm = {**S4, "meta": {**S4_META, "ttft_warm_over_cold": None}}
    first = headlines({"s4": no_warm})[0]
    assert (first.value, first.met) == (None, False)


def test_targets_both_ways() -> None:
    assert Headline("s1", "ratio", 2.0, Target(2.0, at_most=True)).met
    assert not Headline("s1", "ratio", 2.01, Target(2.0, at_most=True)).met
    assert not Headline("s4", "share", 0.89, Target(0.9, at_most=False)).met
    assert Headline("s4", "share", 0.3).met is None


@pytest.mark.parametrize(
    "results",
    [
        {"s1": {"rows": [], "meta": {"ratio": 1.5}}},  # no target
        {"s1": {"rows": [], "meta": {"ratio": "fast", "target": 2.0}}},
        {"s3": {"rows": [S3_CHUNKED], "meta": {"target_ratio_chunked": 3.0}}},  # no unchunked row
        {"s4": {"rows": []}},
    ],
)
def test_a_result_without_its_figures_is_an_error(results: dict[str, dict[str, object]]) -> None:
    with pytest.raises(ValueError):
        headlines(results)
