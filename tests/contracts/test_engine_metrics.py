"""Parsing one server's metrics text into EngineHealth: heartbeat, KV tokens, requests.

(The KV parse alone, `parse_kv_cache`, is tested with pool capacity in tests/quota/test_capacity.py.)
"""

from __future__ import annotations

from contracts.engine_metrics import EngineHealth, parse_engine_health, parse_kv_cache

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


def test_only_the_engine_families_are_read_among_tritons_own() -> None:
    """Triton's per-model metrics (most of the text) and names that merely start like ours are
    skipped before parsing; the engine's numbers are the same."""
    tritons = (
        "# HELP nv_inference_count Number of inferences\n# TYPE nv_inference_count counter\n"
        + "".join(f'nv_inference_count{{model="m{i}",version="1"}} {i}\n' for i in range(200))
        + 'nv_trt_llm_request_metrics_total{request_type="active"} 99\n'
        + 'switchyard_engine_heartbeat_seconds{model="x"} 1.0\n'
    )
    assert parse_engine_health(tritons + METRICS) == parse_engine_health(METRICS)
    assert parse_engine_health(METRICS + tritons) == parse_engine_health(METRICS)


def test_flex_kv_counts_as_preemptible_beside_bulks_and_every_persons_class_as_interactive() -> None:
    """What priority and interactive requests may take (contracts/service_tier.py PREEMPTS):
    flex's KV and bulk's; `bulk_tokens` keeps meaning bulk's alone."""
    tiers = METRICS + "".join(
        f'switchyard_engine_{family}{{model="cpu_engine",request_class="{cls}",version="1"}} {value}\n'
        for family, cls, value in (
            ("kv_blocks", "priority", 40),
            ("kv_blocks", "flex", 12),
            ("requests", "priority", 1),
            ("requests", "interactive", 4),
            ("requests", "flex", 2),
            ("requests", "bulk", 9),
        )
    )
    health = parse_engine_health(tiers)
    assert (health.bulk_tokens, health.flex_tokens, health.preemptible_tokens) == (28 * 16, 12 * 16, 40 * 16)
    assert health.interactive_requests == 1 + 4 + 2  # people's classes; bulk's are not
    kv = parse_kv_cache(tiers)
    assert (kv.bulk_tokens, kv.flex_tokens, kv.preemptible_tokens) == (28 * 16, 12 * 16, 40 * 16)
    assert kv.interactive_requests == 7
    assert parse_engine_health(METRICS).preemptible_tokens == 28 * 16  # an engine of two classes
