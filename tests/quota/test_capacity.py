"""Pool capacity from the servers' TensorRT-LLM KV metrics."""

from __future__ import annotations

import httpx
import pytest

from config.settings import load_config
from contracts.engine_metrics import parse_kv_cache, parse_kv_capacity
from quota.capacity import CapacityMonitor, PoolCapacity, StaticCapacity, config_metrics_urls


def metrics_text(max_blocks: int, free_blocks: int, tokens_per: int = 16, model: str = "cpu_engine") -> str:
    kv = "nv_trt_llm_kv_cache_block_metrics"
    lines = [
        f"# HELP {kv} TRT LLM KV cache block metrics",
        f"# TYPE {kv} gauge",
    ]
    for kind, value in [
        ("max", max_blocks),
        ("free", free_blocks),
        ("used", max_blocks - free_blocks),
        ("tokens_per", tokens_per),
        ("reused", 3),
    ]:
        lines.append(f'{kv}{{kv_cache_block_type="{kind}",model="{model}",version="1"}} {value}')
    return "\n".join(lines) + "\n"


OTHER = """# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{model="llm",version="1"} 42
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="cpu_engine",request_type="max",version="1"} 16
"""


def test_capacity_is_max_blocks_times_tokens_per_block() -> None:
    assert parse_kv_capacity(OTHER + metrics_text(5000, 4000)) == 80_000
    assert parse_kv_cache(metrics_text(5000, 4000)).free_tokens == 64_000


def test_engines_on_one_server_add_up_and_no_gauge_is_zero() -> None:
    text = metrics_text(100, 10, 16, "engine_a") + metrics_text(50, 50, 32, "engine_b").split("\n", 2)[2]
    assert parse_kv_cache(text).capacity_tokens == 100 * 16 + 50 * 32
    assert parse_kv_cache(text).free_tokens == 10 * 16 + 50 * 32
    assert parse_kv_capacity(OTHER) == 0
    assert parse_kv_capacity("") == 0


def test_config_gives_one_metrics_url_per_copy() -> None:
    urls = config_metrics_urls(load_config())
    assert urls == {
        "small": ["http://127.0.0.1:8103/metrics", "http://127.0.0.1:8113/metrics"],
        "large": ["http://127.0.0.1:8203/metrics", "http://127.0.0.1:8213/metrics"],
    }


async def test_monitor_sums_ready_servers_and_counts_unreachable_ones_zero() -> None:
    texts = {"s1": metrics_text(5000, 1000), "s2": metrics_text(2500, 2500)}
    down = {"s2"}

    def handler(request: httpx.Request) -> httpx.Response:
        server = request.url.host
        if server in down:
            raise httpx.ConnectError("connection refused", request=request)
        if server == "starting":
            return httpx.Response(200, text=OTHER)  # up, but no engine loaded yet
        return httpx.Response(200, text=texts[server])

    endpoints = {"small": ["http://s1/metrics", "http://s2/metrics", "http://starting/metrics"], "large": []}
    changed: list[str] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        monitor = CapacityMonitor(lambda: endpoints, client, refresh_s=1.0)
        assert monitor.capacity("small") == PoolCapacity("small")  # nothing known yet
        monitor.subscribe(changed.append)
        await monitor.refresh()
        assert monitor.capacity("small") == PoolCapacity("small", 80_000, 16_000, ready_servers=1, servers=3)
        assert monitor.capacity("large") == PoolCapacity("large")
        assert changed == ["small"]
        await monitor.refresh()
        assert changed == ["small"]  # no change, no call
        down.clear()
        await monitor.refresh()
        assert monitor.capacity("small").capacity_tokens == 120_000
        assert monitor.capacity("small").ready_servers == 2
        assert changed == ["small", "small"]


def test_static_capacity_tells_its_listeners() -> None:
    source = StaticCapacity({"small": 1000})
    changed: list[str] = []
    source.subscribe(changed.append)
    assert source.capacity("small").capacity_tokens == 1000
    assert source.capacity("large").capacity_tokens == 0
    source.set("large", 500)
    assert changed == ["large"]


async def test_monitor_refuses_a_non_positive_refresh() -> None:
    async with httpx.AsyncClient() as client:
        with pytest.raises(ValueError, match="refresh_s"):
            CapacityMonitor(dict, client, refresh_s=0)


def test_interactive_requests_in_the_engines_are_counted() -> None:
    classes = """# HELP switchyard_engine_requests Requests in the engine (admitted or waiting), by class
# TYPE switchyard_engine_requests gauge
switchyard_engine_requests{model="cpu_engine",request_class="interactive",version="1"} 3
switchyard_engine_requests{model="cpu_engine",request_class="bulk",version="1"} 7
"""
    assert parse_kv_cache(OTHER + metrics_text(5000, 4000) + classes).interactive_requests == 3
    assert parse_kv_cache(metrics_text(5000, 4000)).interactive_requests == 0


def test_kv_held_by_bulk_is_counted_in_tokens_per_engine() -> None:
    def blocks(model: str, bulk: int) -> str:
        return (
            f'switchyard_engine_kv_blocks{{model="{model}",request_class="interactive",version="1"}} 9\n'
            f'switchyard_engine_kv_blocks{{model="{model}",request_class="bulk",version="1"}} {bulk}\n'
        )

    header = "# TYPE switchyard_engine_kv_blocks gauge\n"
    one = metrics_text(5000, 4000) + header + blocks("cpu_engine", 30)
    assert parse_kv_cache(one).bulk_tokens == 30 * 16
    # Two engines of different block sizes: each one's blocks at its own size.
    two = metrics_text(100, 10) + metrics_text(50, 50, tokens_per=32, model="small")
    two += header + blocks("cpu_engine", 30) + blocks("small", 5)
    assert parse_kv_cache(two).bulk_tokens == 30 * 16 + 5 * 32
    # TensorRT-LLM exports none: no bulk is room for people there.
    assert parse_kv_cache(metrics_text(5000, 4000)).bulk_tokens == 0
