"""The liveness verdict from successive probes (parsing the metrics: tests/contracts/test_engine_metrics.py)."""

from __future__ import annotations

import pytest

from contracts.engine_metrics import EngineHealth
from fleet_state.server_health import Liveness, Probe, Verdict


def probe(beat: float | None, ready: bool = True, refused: bool = False) -> Probe:
    return Probe(ready, refused, EngineHealth(beat, 0, 0, 0, 0) if beat is not None else None)


def test_alive_needs_ready_and_an_advancing_heartbeat() -> None:
    live = Liveness(dead_after_s=2.0)
    assert live.observe(0.0, probe(None, ready=False, refused=True)) is Verdict.STARTING  # loading
    assert live.observe(0.5, probe(10.0)) is Verdict.STARTING  # one value proves nothing
    assert live.observe(1.0, probe(10.0)) is Verdict.STARTING
    assert live.observe(1.5, probe(10.4)) is Verdict.ALIVE
    assert live.ever_alive


def test_a_heartbeat_that_stops_is_dead_after_dead_after_s_though_health_stays_green() -> None:
    live = Liveness(dead_after_s=2.0)
    live.observe(0.0, probe(1.0))
    assert live.observe(0.5, probe(1.5)) is Verdict.ALIVE
    for now in (1.0, 1.5, 2.0, 2.5):  # the stub crashed at ~0.5: Triton still says ready
        assert live.observe(now, probe(1.5)) is Verdict.ALIVE
    assert live.observe(2.6, probe(1.5)) is Verdict.DEAD


def test_refused_is_dead_at_once_but_a_slow_scrape_is_only_suspect() -> None:
    live = Liveness(dead_after_s=2.0)
    live.observe(0.0, probe(1.0))
    live.observe(0.5, probe(1.5))
    assert live.observe(1.0, probe(None, ready=False)) is Verdict.SUSPECT  # timed out
    assert live.observe(1.5, probe(2.5)) is Verdict.ALIVE
    assert live.observe(2.0, probe(None, ready=False, refused=True)) is Verdict.DEAD


def test_not_ready_for_dead_after_s_is_dead() -> None:
    live = Liveness(dead_after_s=2.0)
    live.observe(0.0, probe(1.0))
    live.observe(0.5, probe(1.5))
    beat = 1.5
    for now in (1.0, 1.5, 2.0, 2.5):
        beat += 0.5
        assert live.observe(now, probe(beat, ready=False)) is Verdict.SUSPECT
    assert live.observe(2.6, probe(beat + 0.5, ready=False)) is Verdict.DEAD


def test_dead_after_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Liveness(0.0)
