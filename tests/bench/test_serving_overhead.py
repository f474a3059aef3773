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
    for row in processes.values():
        assert row["cpu_s"] >= 0 and row["ms_per_response"] >= 0 and row["us_per_token"] >= 0
    assert processes[("gateway + triton", "stub llm")]["cpu_s"] > 0
    meta = run["meta"]
    assert meta["label"] == "quick" and meta["max_stream_responses_per_s"] >= 1
    assert meta["relay_ms_per_response"] is not None and meta["tokens_per_s_ratio"] > 0
