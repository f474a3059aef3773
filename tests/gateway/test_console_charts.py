"""The usage page's arithmetic and drawing, exactly: the window's hours, series laid out per
hour, stacked bars, the share drawn or said, and a CSV a spreadsheet cannot run."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from gateway.console.charts import TOP, ChartSeries, stacked_bars
from gateway.console.usage_view import build_usage_view, usage_csv, usage_window
from quota.usage import UsageRow

NOW = datetime(2026, 3, 4, 10, 25, tzinfo=UTC)


def test_windows_end_now_and_start_on_an_hour() -> None:
    day = usage_window("24h", NOW)
    assert day.start == datetime(2026, 3, 3, 11, tzinfo=UTC) and day.end == NOW
    assert len(day.hours) == 24 and day.hours[-1] == datetime(2026, 3, 4, 10, tzinfo=UTC)
    week = usage_window("7d", NOW)
    assert len(week.hours) == 168 and week.start == datetime(2026, 2, 25, 11, tzinfo=UTC)
    with pytest.raises(ValueError, match="24h, 7d"):
        usage_window("30d", NOW)


def test_rows_are_laid_out_per_series_and_hour_and_totalled() -> None:
    window = usage_window("24h", NOW)
    hour = datetime(2026, 3, 4, 9, tzinfo=UTC)
    rows = [
        UsageRow("a", "small", "interactive", hour, requests=2, prompt_tokens=10),
        UsageRow("a", "small", "interactive", hour + timedelta(hours=1), requests=1, prompt_tokens=5),
        UsageRow("a", "large", "bulk", hour, requests=4, kv_token_seconds=1.5),
        UsageRow("a", "large", "bulk", hour - timedelta(days=3), requests=100),  # outside: in no bar
    ]
    view = build_usage_view(window, rows[:3], kv_share_per_hour=None, share_fraction=None)
    assert [s.label for s in view.series] == ["large · batch", "small · default"]
    small = view.series[1]
    assert small.per_hour["requests"][-2:] == [2.0, 1.0] and sum(small.per_hour["requests"]) == 3
    assert small.totals["prompt_tokens"] == 15 and view.series[0].totals["kv_token_seconds"] == 1.5
    assert view.totals["requests"] == 7
    outside = build_usage_view(window, rows[3:], None, None)
    assert sum(outside.series[0].per_hour["requests"]) == 0


def test_bars_stack_in_series_order_and_carry_their_totals() -> None:
    hours = usage_window("24h", NOW).hours
    first = ChartSeries("m · interactive", [0.0] * 23 + [30.0])
    second = ChartSeries("m · bulk", [0.0] * 23 + [10.0])
    svg = str(stacked_bars("c", "Requests", hours, [first, second]))
    paths = re.findall(r'data-series="([^"]+)" data-total="([^"]+)" d="([^"]+)"', svg)
    assert [(name, total) for name, total, _ in paths] == [("m · interactive", "30"), ("m · bulk", "10")]
    (y0, y1), (y2, y3) = (re.findall(r"M[\d.]+ ([\d.]+)V([\d.]+)", d)[0] for _, _, d in paths)
    assert float(y1) == pytest.approx(float(y2))  # the second bar starts where the first ends
    assert float(y0) - float(y1) == pytest.approx(3 * (float(y2) - float(y3)), rel=0.01)


def test_the_share_is_drawn_near_the_usage_and_said_when_far_above_it() -> None:
    hours = usage_window("24h", NOW).hours
    used = [ChartSeries("m · bulk", [0.0] * 23 + [100.0])]
    near = str(stacked_bars("c", "KV", hours, used, share=250.0))
    assert '<line class="share"' in near and 'data-share="250"' in near
    far = str(stacked_bars("c", "KV", hours, used, share=1_000_000.0))
    assert '<line class="share"' not in far and "off this scale" in far
    bar = re.search(r' d="M[\d.]+ ([\d.]+)V([\d.]+)', far)
    assert bar and float(bar.group(2)) == TOP  # the busiest hour still reaches the top of its own scale


def test_labels_are_escaped_and_csv_cells_cannot_become_formulas() -> None:
    hours = usage_window("24h", NOW).hours
    svg = str(stacked_bars("c", "R", hours, [ChartSeries('<script>"x"', [1.0] * 24)]))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    text = usage_csv([UsageRow("a", "=HYPERLINK(1)", "bulk", hours[0], requests=1, kv_token_seconds=0.5)])
    assert text.splitlines()[1] == "2026-03-03T11:00:00Z,a,'=HYPERLINK(1),bulk,1,0,0,0,0,0,0.5"
