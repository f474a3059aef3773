"""bench peers' row arithmetic: CPU per event and per request net of idle, the step quoted,
TTFT and latency added over the bare upstream, the most streams held cleanly, the ratios."""

from __future__ import annotations

from bench.peer_rows import Cpu, GatewaySeen, ShortSeen, StepSeen, error_row, gateway_row, percentile, ratios


def _step(
    streams: int, events: int, cpu_s: float, ttfts: list[float], errors: dict[str, int] | None = None
) -> StepSeen:
    return StepSeen(
        streams, streams, errors or {}, events, 10.0, Cpu(cpu_s, 0.1), 100_000, 100_000 + 5 * streams, ttfts
    )


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0


def test_a_row_is_net_of_idle_and_quoted_at_the_largest_step_held_at_pace() -> None:
    bare = GatewaySeen("upstream", "bench", Cpu(0.0), [_step(100, 25_000, 0.25, [0.001, 0.002])])
    bare = GatewaySeen(bare.name, bare.version, bare.idle, bare.steps, ShortSeen(10, [0.36] * 10, {}, 1.0, Cpu(0.01)))
    seen = GatewaySeen(
        "litellm",
        "1.0",
        Cpu(0.05, 0.0),  # 5% of a core at rest: 0.5 s over a 10 s hold is not the events'
        [
            _step(100, 25_000, 1.5, [0.011, 0.032]),  # (1.5 - 0.5) s / 25,000 = 40 µs an event
            _step(1000, 240_000, 6.5, [0.02]),  # pace kept 0.96: (6.5 - 0.5) / 240,000 = 25 µs
            _step(2500, 300_000, 8.5, [0.5], {"open timeout": 3}),  # errors: not quoted
        ],
        ShortSeen(100, [0.37] * 98 + [0.41] * 2, {"http 500": 1}, 2.0, Cpu(0.3)),  # (0.3 - 0.1) s / 100
    )
    row = gateway_row(seen, bare)
    assert row["cpu_us_per_event"] == 25.0 and row["at_streams"] == 1000
    assert row["cpu_ms_per_request"] == 2.0
    assert row["ttft_added_p50_ms"] == 10.0 and row["ttft_added_p99_ms"] == 30.0
    assert row["latency_added_p50_ms"] == 10.0 and row["latency_added_p99_ms"] == 50.0
    assert row["streams_0_errors"] == 1000 and row["kb_per_stream"] == 5.0
    assert row["short_errors"] == 1
    assert [step["pace_kept"] for step in row["steps"]] == [1.0, 0.96, 0.48]
    assert row["steps"][0]["upstream_us_per_event"] == 4.0  # 0.1 s / 25,000


def test_a_gateway_behind_the_pace_everywhere_is_quoted_at_its_first_step() -> None:
    seen = GatewaySeen("slow", "?", Cpu(0.0), [_step(100, 10_000, 1.0, [0.1]), _step(1000, 20_000, 1.0, [0.1])])
    row = gateway_row(seen, None)
    assert row["at_streams"] == 100 and row["cpu_us_per_event"] == 100.0
    assert row["streams_0_errors"] == 1000  # held with no error, if behind the pace
    assert row["ttft_added_p99_ms"] is None


def test_ratios_say_whether_the_targets_are_met_and_skip_missing_peers() -> None:
    rows = [
        {"gateway": "switchyard", "cpu_us_per_event": 30.0, "cpu_ms_per_request": 1.0},
        {"gateway": "litellm", "cpu_us_per_event": 100.0, "cpu_ms_per_request": 1.5},
        error_row("smg", "not installed"),
    ]
    found = ratios(rows)
    assert found["per_event_vs_litellm"] == {"ratio": 0.3, "target": 0.5, "met": True}
    assert found["per_request_vs_litellm"] == {"ratio": 0.667, "target": 0.5, "met": False}
    assert found["per_event_vs_smg"] == {"ratio": None, "target": 3.0, "met": None}
