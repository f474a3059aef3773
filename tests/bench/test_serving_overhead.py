"""The serving-overhead bench: labelled runs kept side by side, the relay's CPU as defined, and
a quick run on a real stack (tritonserver, gateway, Redis) with every process measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.bench_serving_overhead import NAME, main
from bench.labeled_results import read_runs, write_run
from bench.serving_processes import CpuSnapshot, ServingProcess, window_cpu


def test_a_new_label_is_added_beside_the_runs_before(tmp_path: Path) -> None:
    path = tmp_path / "serving_overhead.json"
    path.write_text(json.dumps({"name": NAME, "meta": {"throughput_ratio": 0.65}, "rows": [{"path": "x"}]}))
    write_run(path, NAME, "before", {"meta": {"relay_ms_per_response": 1.7}})
    write_run(path, NAME, "after", {"meta": {"relay_ms_per_response": 0.5}})
    write_run(path, NAME, "after", {"meta": {"relay_ms_per_response": 0.4}})
    runs = read_runs(path)
    assert list(runs) == ["legacy", "before", "after"]
    assert runs["legacy"] == {"meta": {"throughput_ratio": 0.65}, "rows": [{"path": "x"}]}
    assert runs["before"]["meta"]["relay_ms_per_response"] == 1.7
    assert runs["after"]["meta"]["relay_ms_per_response"] == 0.4
    assert json.loads(path.read_text())["name"] == NAME


def test_the_relay_is_the_relay_processes_less_the_engine_step_thread() -> None:
    processes = [
        ServingProcess("tritonserver", 1, relay=True),
        ServingProcess("stub cpu_engine", 2, relay=True),
        ServingProcess("gateway worker 0", 3, relay=True),
        ServingProcess("redis", 4, relay=False),
        ServingProcess("client", 5, relay=False),
    ]
    before = CpuSnapshot(10.0, {1: 1.0, 2: 5.0, 3: 2.0, 4: 0.5, 5: 1.0}, {2: 4.0})
    after = CpuSnapshot(40.0, {1: 2.5, 2: 35.0, 3: 4.0, 4: 0.75, 5: 2.0}, {2: 31.0})
    cpu = window_cpu(processes, before, after)
    assert cpu.wall_s == 30.0
    assert cpu.by_role == {
        "tritonserver": 1.5,
        "stub cpu_engine": 30.0,
        "gateway worker 0": 2.0,
        "redis": 0.25,
        "client": 1.0,
    }
    assert cpu.engine_thread_s == 27.0
    assert cpu.relay_s == pytest.approx(1.5 + 30.0 + 2.0 - 27.0)


def test_without_an_engine_step_thread_there_is_no_relay_figure() -> None:
    processes = [ServingProcess("tritonserver", 1, relay=True)]
    cpu = window_cpu(processes, CpuSnapshot(0.0, {1: 0.0}, {}), CpuSnapshot(1.0, {1: 0.5}, {}))
    assert cpu.engine_thread_s is None and cpu.relay_s is None


def test_what_streaming_added_is_each_process_less_its_idle_rate() -> None:
    processes = [
        ServingProcess("server host", 1, relay=False),
        ServingProcess("stub llm", 2, relay=True),
        ServingProcess("gateway worker 0", 3, relay=True),
    ]
    # Idle for 10 s: the server host probes (0.5 s), the stub's threads tick (0.1 s, of which
    # its engine thread 0.02 s), the worker refreshes its view of the fleet (0.2 s).
    idle = window_cpu(
        processes,
        CpuSnapshot(0.0, {1: 0.0, 2: 0.0, 3: 0.0}, {2: 0.0}),
        CpuSnapshot(10.0, {1: 0.5, 2: 0.1, 3: 0.2}, {2: 0.02}),
    )
    busy = window_cpu(
        processes,
        CpuSnapshot(0.0, {1: 0.0, 2: 0.0, 3: 0.0}, {2: 0.0}),
        CpuSnapshot(30.0, {1: 1.5, 2: 20.0, 3: 3.0}, {2: 18.0}),
    )
    added = busy.less_idle(idle)
    assert added.wall_s == 30.0
    assert added.by_role == pytest.approx({"server host": 0.0, "stub llm": 19.7, "gateway worker 0": 2.4})
    assert added.engine_thread_s == pytest.approx(17.94)
    assert added.relay_s == pytest.approx(19.7 + 2.4 - 17.94)
    assert busy.relay_s is not None and added.relay_s < busy.relay_s


def test_of_two_idle_windows_each_process_is_read_at_its_lower_rate() -> None:
    processes = [ServingProcess("gateway worker 0", 1, relay=True), ServingProcess("stub llm", 2, relay=True)]
    zero = CpuSnapshot(0.0, {1: 0.0, 2: 0.0}, {2: 0.0})
    # The first window (10 s) caught the worker's first refresh; the second (20 s) a stub's flush.
    first = window_cpu(processes, zero, CpuSnapshot(10.0, {1: 0.9, 2: 0.1}, {2: 0.01}))
    second = window_cpu(processes, zero, CpuSnapshot(20.0, {1: 0.2, 2: 0.6}, {2: 0.0}))
    idle = first.quieter(second)
    assert idle.wall_s == 10.0
    assert idle.by_role == pytest.approx({"gateway worker 0": 0.1, "stub llm": 0.1})
    assert idle.engine_thread_s == pytest.approx(0.0)


@pytest.mark.integration
def test_a_quick_run_measures_every_process_of_the_path(tmp_path: Path) -> None:
    path = tmp_path / "serving_overhead.json"
    assert main(["--quick", "--label", "quick", "--out", str(path)]) == 0
    run = json.loads(path.read_text())["runs"]["quick"]
    variants = {row["variant"]: row for row in run["variants"]}
    assert list(variants) == ["gateway + triton", "triton direct", "engine alone"]
    for row in variants.values():
        assert row["errors"] == 0, row.get("error_kinds")
        assert row["responses"] > 0 and row["tokens"] >= row["responses"] and row["tokens_per_s"] > 0
    for name in ("gateway + triton", "triton direct"):
        assert variants[name]["relay_ms_per_response"] is not None and variants[name]["engine_us_per_token"] > 0
    processes = {(row["variant"], row["process"]): row for row in run["processes"]}
    # The engine runs inside llm's stub (engine_in_process, the default): no cpu_engine stub.
    for process in ("tritonserver", "stub llm", "gateway worker 0", "gateway worker 1", "client"):
        assert ("gateway + triton", process) in processes, process
    assert ("gateway + triton", "stub cpu_engine") not in processes
    assert ("triton direct", "stub llm") in processes and ("engine alone", "  of which engine-step thread") in processes
    for row in processes.values():  # what streaming added may read a hair below 0 off the path
        assert row["cpu_s"] >= 0 and row["ms_per_response"] is not None and row["us_per_token"] is not None
    assert processes[("gateway + triton", "relay (sum)")]["ms_per_response"] > 0
    assert processes[("gateway + triton", "server host")]["idle_core_pct"] is not None
    assert processes[("gateway + triton", "stub llm")]["cpu_s"] > 0
    meta = run["meta"]
    assert meta["label"] == "quick" and meta["max_stream_responses_per_s"] >= 1
    assert meta["relay_ms_per_response"] is not None and meta["tokens_per_s_ratio"] > 0
    # The idle stack's work is never negative: the gross figure is at least what streaming added.
    assert meta["relay_ms_per_response_gross"] >= meta["relay_ms_per_response"] - 0.001
