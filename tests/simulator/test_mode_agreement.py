"""The fast mode (fluid fleet + step-level probes) against the exact mode (every server
step-level) on a fleet small enough to run exactly: 4 GPUs, the first hour of the weekday.

Cost, on this two-core machine: 48 s of CPU (the exact run ~30 s, the fast one ~13 s; 87 s
of wall clock while other jobs shared the cores), where the 8-GPU hour this test used to run
took 83 s of CPU (91 s wall on a quiet machine, past its 180 s timeout on a busy CI one).
4 GPUs keep every tolerance below; half an hour of 8 GPUs does not (bulk done over the first
half hour, while yesterday's carry-over floods the dispatcher, is 17-21% apart on seeds 1-2).

Measured, fast against exact, 4 GPUs x 1 h, probes every 300 s (bulk leasing 0.92 of prompt
+ max_tokens), seeds 1-5:
- TTFT p50 0.104-0.109 s against 0.111-0.113 s (2-8% apart), p90 2-11% apart
- bulk requests done 10.5-14.3% more in the fast mode; busy 1.9-2.3 points higher
- ITL p50 equal (32.4 ms); interactive arrivals within 0.1-3.4%
- GPU-hours paid equal: neither mode scales in the first hour (4 servers throughout), so that
  assertion only guards against one of them starting to.
Seed 1 sits at the median for bulk (11.3%) and TTFT p50 (3.9%); seed 3, which the 8-GPU
version ran, passes too, at 14.3% bulk. At 8 GPUs (seeds 1-3): p50 6-8%, p90 9-11%, bulk
9-13%, busy 2.5-2.7 points; at 6 GPUs bulk 11%.

Tolerances, and why they are not tighter:
- TTFT p50 within 15% and p90 within 30%: the probes are 4-server cells, the exact fleet has
  4-8 servers, so a 30,000-token document finds a server with room differently in a probe.
- GPU-hours paid within 10%: the same autoscaler on nearly the same signals.
- bulk requests done within 15% and busy KV within 10%: the fluid releases bulk at the mean
  lease and turns it over continuously; the exact dispatcher releases whole requests, and a
  document at the head of a batch waits for room (both effects shrink with the fleet, and
  with the hours past the start, where the carry-over queues). With bulk leasing less than
  it may hold, the fluid caps KV held at the pool's while a few servers of the exact fleet
  run over and preempt bulk as others have room: +2 to +2.7 points of busy, against +1 with
  whole leases.
"""

from __future__ import annotations

import pytest

from simulator.fluid_run import ProbeSettings
from simulator.runner import run_policy
from simulator.scenario import scenario
from simulator.settings import SimSettings


@pytest.mark.slow
@pytest.mark.timeout(300)  # 6x its quiet runtime here, 3x with the cores shared: CI is slower
def test_fast_mode_agrees_with_the_exact_mode_on_a_small_fleet() -> None:
    day = scenario("weekday", gpus=4, hours=1.0)
    settings = SimSettings()
    exact = run_policy("autoscaler", day, settings, seed=1, exact=True)
    fast = run_policy("autoscaler", day, settings, seed=1, exact=False, probe=ProbeSettings(every_s=300.0))
    e, f = exact.recorder, fast.recorder
    e_ttft, f_ttft = e.ttft_over(0, day.duration_s), f.ttft_over(0, day.duration_s)
    assert f_ttft.percentile(0.5) == pytest.approx(e_ttft.percentile(0.5), rel=0.15)
    assert f_ttft.percentile(0.9) == pytest.approx(e_ttft.percentile(0.9), rel=0.3)
    assert f.itl_over(0, day.duration_s).percentile(0.5) == pytest.approx(
        e.itl_over(0, day.duration_s).percentile(0.5), rel=0.25
    )
    assert f.paid_gpu_s == pytest.approx(e.paid_gpu_s, rel=0.1)
    assert f.counters["bulk_done"] == pytest.approx(e.counters["bulk_done"], rel=0.15)
    assert fast.summary.busy_fraction == pytest.approx(exact.summary.busy_fraction, rel=0.1)
    assert f.counters["interactive_arrived"] == pytest.approx(e.counters["interactive_arrived"], rel=0.05)
