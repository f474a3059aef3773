"""Same seed, same report; another seed, another day. Both modes."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from simulator.fluid_run import ProbeSettings
from simulator.runner import PolicyRun, run_policy
from simulator.scenario import scenario
from simulator.settings import SimSettings

SHORT = scenario("weekday", gpus=8, hours=0.05)


def fingerprint(run: PolicyRun) -> tuple[object, ...]:
    rec = run.recorder
    summary = {k: v for k, v in asdict(run.summary).items() if k != "wall_s"}
    return (
        summary,
        rec.samples,
        dict(rec.counters),
        [h.counts for h in rec.ttft],
        [h.counts for h in rec.itl],
        rec.paid_gpu_s,
        rec.kv_token_s,
    )


@pytest.mark.parametrize("exact", [True, False])
def test_same_seed_same_report(exact: bool) -> None:
    probe = ProbeSettings(every_s=60.0, cell=2, warmup_s=10.0, window_s=20.0)
    runs = [run_policy("autoscaler", SHORT, SimSettings(), seed=seed, exact=exact, probe=probe) for seed in (5, 5, 6)]
    assert fingerprint(runs[0]) == fingerprint(runs[1])
    assert fingerprint(runs[0]) != fingerprint(runs[2])
    assert runs[0].recorder.counters["interactive_arrived"] > 0
