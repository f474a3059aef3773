"""Parsing a server's metrics into EngineHealth, and the liveness verdict from successive probes."""

from __future__ import annotations

import pytest

from contracts.engine_metrics import EngineHealth, parse_engine_health
from router.server_health import Liveness, Probe, Verdict

METRICS = """\
# HELP nv_trt_llm_kv_cache_block_metrics KV cache blocks
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="cpu_engine",version="1"} 512
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free",model="cpu_engine",version="1"} 384
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="cpu_engine",version="1"} 16
# HELP nv_trt_llm_request_metrics Requests
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{request_type="active",model="cpu_engine",version="1"} 3
nv_trt_llm_request_metrics{request_type="max",model="cpu_engine",version="1"} 16
nv_trt_llm_request_metrics{request_type="waiting",model="cpu_engine",version="1"} 2
# HELP switchyard_engine_heartbeat Unix time of the engine host's latest pass
# TYPE switchyard_engine_heartbeat gauge
switchyard_engine_heartbeat{model="cpu_engine",version="1"} 1732884000.123456
# HELP switchyard_engine_kv_blocks KV cache blocks held by admitted requests, by class
# TYPE switchyard_engine_kv_blocks gauge
switchyard_engine_kv_blocks{model="cpu_engine",request_class="interactive",version="1"} 100
switchyard_engine_kv_blocks{model="cpu_engine",request_class="bulk",version="1"} 28
"""


def test_parse_reads_heartbeat_kv_and_requests() -> None:
    health = parse_engine_health(METRICS)
    assert health == EngineHealth(1732884000.123456, 512 * 16, 384 * 16, 3, 2, bulk_tokens=28 * 16)
    assert health.in_flight == 5
    assert health.used_fraction == 0.25


def test_a_server_still_loading_exports_nothing() -> None:
    health = parse_engine_health("# HELP nv_inference_count x\n# TYPE nv_inference_count counter\n")
    assert health == EngineHealth(None, 0, 0, 0, 0)
    assert health.used_fraction is None


def test_with_two_engines_the_oldest_heartbeat_counts() -> None:
    two = METRICS + 'switchyard_engine_heartbeat{model="other",version="1"} 1732883990.5\n'
    assert parse_engine_health(two).heartbeat == 1732883990.5


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
