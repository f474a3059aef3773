"""Policies run in separate processes come out as they do one after another in one."""

from __future__ import annotations

import pytest

from simulator.fluid_run import ProbeSettings
from simulator.runner import PolicyRun, run_policies
from simulator.scenario import scenario
from simulator.settings import SimSettings

SHORT = scenario("weekday", gpus=8, hours=0.05)
PROBE = ProbeSettings(every_s=60.0, cell=2, warmup_s=10.0, window_s=20.0)


def fingerprint(run: PolicyRun) -> tuple[object, ...]:
    rec = run.recorder
    return (
        run.name,
        run.summary.row() | {"wall_s": None},
        rec.samples,
        dict(rec.counters),
        [h.counts for h in rec.ttft],
        [h.counts for h in rec.ttft_chat],
        [h.counts for h in rec.itl],
        rec.kv_token_s,
    )


def test_processes_give_the_runs_one_process_gives() -> None:
    """Each policy's run owns its policy, fleet and generators: a second process changes
    nothing but the wall time, and the runs come back in the order asked."""
    names = ["static", "autoscaler", "no-backfill"]
    heard: list[str] = []
    serial = run_policies(names, SHORT, SimSettings(), seed=4, exact=False, probe=PROBE, jobs=1)
    parallel = run_policies(
        names, SHORT, SimSettings(), seed=4, exact=False, probe=PROBE, jobs=2, on_done=lambda r: heard.append(r.name)
    )
    assert [run.name for run in parallel] == names
    assert sorted(heard) == sorted(names)
    assert [fingerprint(r) for r in parallel] == [fingerprint(r) for r in serial]
    assert serial[0].recorder.counters["interactive_arrived"] > 0


def test_jobs_must_be_positive() -> None:
    with pytest.raises(ValueError, match="jobs"):
        run_policies(["static"], SHORT, SimSettings(), seed=1, exact=False, probe=PROBE, jobs=0)
