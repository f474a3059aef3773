"""The latency figure shows what the report judges S6 by: chat-sized and beyond-the-read TTFT
beside every prompt's, the 1-s target, hours and seconds labelled in plain numbers."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt

from simulator.latency_plot import (
    BEYOND_READ,
    CHAT_SIZED,
    EVERY_PROMPT,
    hour_ticks,
    latency_figure,
    ttft_series,
    write_latency,
)
from simulator.recorder import Recorder, TtftSample
from simulator.runner import PolicyRun
from simulator.scenario import HOUR, scenario
from simulator.summary import summarize

DAY = scenario("weekday", gpus=8, hours=24)


def day_run(name: str) -> PolicyRun:
    """Every hour: 98 chat prompts at 0.5 s (0.45 s beyond their read) and 2 documents at 2.5 s
    (0.4 s beyond theirs); one hour of a day left empty."""
    recorder = Recorder(DAY.hours)
    for hour in range(24):
        if hour == 3:
            continue
        for i in range(98):
            recorder.first_token(hour * HOUR + i, TtftSample(0.5, True, 0.45))
        for i in range(2):
            recorder.first_token(hour * HOUR + 100 + i, TtftSample(2.5, False, 0.4))
        recorder.gap(hour * HOUR, 0.033)
    return PolicyRun(name, recorder, summarize(name, recorder, DAY, wall_s=0.0))


def test_the_three_series_read_what_s6_reads() -> None:
    series = ttft_series(day_run("p").recorder)
    assert set(series) == {EVERY_PROMPT, CHAT_SIZED, BEYOND_READ}
    assert all(len(values) == 24 for values in series.values())
    every, chat, beyond = series[EVERY_PROMPT][0], series[CHAT_SIZED][0], series[BEYOND_READ][0]
    assert every > 2.0  # the p99 falls among the documents
    assert 0.5 <= chat < 0.52 and 0.45 <= beyond < 0.47  # within a 2% bucket
    assert all(math.isnan(values[3]) for values in series.values())  # no samples: a gap


def test_each_policy_panel_has_the_three_lines_the_target_and_readable_axes() -> None:
    runs = [day_run("autoscaler"), day_run("static")]
    fig = latency_figure(runs)
    try:
        fig.canvas.draw()
        panels = [ax for ax in fig.axes if ax.get_ylabel() == "TTFT p99 (s)"]
        assert [ax.get_title().split(":")[0] for ax in panels] == ["autoscaler", "static"]
        for ax in panels:
            labels = [line.get_label() for line in ax.get_lines()]
            assert {EVERY_PROMPT, CHAT_SIZED, BEYOND_READ, "target 1 s"} <= set(labels)
            shown = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
            assert "1" in shown and len(shown) >= 3, shown  # plain numbers, more than one decade mark
            hours = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
            assert hours == [f"{h:02d}:00" for h in range(0, 25, 3)]
        legend_texts = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
        assert {EVERY_PROMPT, CHAT_SIZED, BEYOND_READ} <= legend_texts
        assert any(ax.get_ylabel() == "inter-token p99 (ms)" for ax in fig.axes)
    finally:
        plt.close(fig)


def test_hour_ticks_thin_out_with_the_run() -> None:
    assert hour_ticks(1) == [0, 1]
    assert hour_ticks(10) == [0, 2, 4, 6, 8, 10]
    assert hour_ticks(24) == list(range(0, 25, 3))


def test_the_figure_is_written(tmp_path: Path) -> None:
    path = write_latency([day_run("autoscaler")], tmp_path / "latency.png")
    assert path.stat().st_size > 10_000
