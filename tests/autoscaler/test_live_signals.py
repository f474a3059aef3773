"""PoolSignals read from a real Redis (registry, usage buckets, batches) and scripted /metrics
pages (servers and the gateway), served through httpx's mock transport."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import redis.asyncio as aioredis

from autoscaler.bulk_backlog import BulkBacklog
from autoscaler.live_signals import LiveSignals
from autoscaler.signals import BulkDemand
from autoscaler.usage_rates import EndedRequests
from bulk.batch_store import BatchRecord, BatchStatus, BatchStore
from config.settings import SwitchyardConfig
from fleet_state.registry import ServerInfo, ServerRegistry
from fleet_state.server_state import ServerState
from quota.usage import UsageMeter, UsageRecord

NOW = 1_800_000_000.0


def config() -> SwitchyardConfig:
    return SwitchyardConfig.model_validate(
        {
            "models": {"m": {"weights_uri": "m", "max_context_tokens": 4096}},
            "pools": {
                "a": {"model_id": "m", "ports": {"http": 9000, "grpc": 9001, "metrics": 9002}, "max_copies": 3},
                "b": {"model_id": "m", "ports": {"http": 9100, "grpc": 9101, "metrics": 9102}},
            },
        }
    )


def server_metrics(
    max_blocks: int, free_blocks: int, waiting: int, interactive: int, flex: int = 0, flex_blocks: int = 0
) -> str:
    labels = 'model="cpu_engine",version="1"'
    return "\n".join(
        [
            f'nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type="max",{labels}}} {max_blocks}',
            f'nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type="free",{labels}}} {free_blocks}',
            f'nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type="tokens_per",{labels}}} 16',
            f'nv_trt_llm_request_metrics{{request_type="active",{labels}}} {interactive}',
            f'nv_trt_llm_request_metrics{{request_type="waiting",{labels}}} {waiting}',
            f'switchyard_engine_requests{{request_class="interactive",{labels}}} {interactive}',
            f'switchyard_engine_requests{{request_class="flex",{labels}}} {flex}',
            f'switchyard_engine_kv_blocks{{request_class="flex",{labels}}} {flex_blocks}',
            "",
        ]
    )


def gateway_metrics(counts: dict[float, int]) -> str:
    name = "switchyard_gateway_time_to_first_token_seconds"
    lines = [f"# TYPE {name} histogram"]
    for le, count in counts.items():
        bound = "+Inf" if le == float("inf") else repr(le)
        lines.append(f'{name}_bucket{{le="{bound}",model="m",request_class="interactive"}} {count}')
    lines.append(f'{name}_count{{model="m",request_class="interactive"}} {counts[float("inf")]}')
    return "\n".join(lines) + "\n"


class Pages:
    """What each /metrics URL answers now (a missing one: connection refused)."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}

    def handler(self, request: httpx.Request) -> httpx.Response:
        page = self.pages.get(str(request.url))
        if page is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, text=page)


def info(server_id: str, pool_id: str, metrics_port: int, state: ServerState, heartbeat_at: float = NOW) -> ServerInfo:
    return ServerInfo(server_id, pool_id, "127.0.0.1", 1, 2, metrics_port, (), state, NOW - 60, heartbeat_at)


async def test_signals_come_from_the_registry_metrics_usage_and_batches(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    registry = ServerRegistry(client, dead_after_s=2.0)
    for server in (
        info("a-0", "a", 9002, ServerState.READY),
        info("a-1", "a", 9012, ServerState.READY),
        info("a-2", "a", 9022, ServerState.STARTING),
        info("a-3", "a", 9032, ServerState.DRAINING),
        info("a-4", "a", 9042, ServerState.READY, heartbeat_at=NOW - 30),  # dead: not counted
        info("b-0", "b", 9102, ServerState.READY),
    ):
        await registry.register(server)
    pages = Pages()
    pages.pages = {
        "http://127.0.0.1:9002/metrics": server_metrics(100, 50, waiting=2, interactive=3, flex_blocks=10),
        "http://127.0.0.1:9012/metrics": server_metrics(100, 100, waiting=1, interactive=0),
        "http://127.0.0.1:9032/metrics": server_metrics(100, 90, waiting=0, interactive=1),
        "http://gw/metrics": gateway_metrics({0.1: 10, 1.0: 10, float("inf"): 10}),
    }
    deadline = NOW + 3600
    await BatchStore(client).create(
        BatchRecord("batch_1", "t", "m", "native", "/v1/generate", "k", None, "f.jsonl",
                    BatchStatus.IN_PROGRESS, NOW - 100, deadline, total=10, done=2, failed=1)
    )  # fmt: skip
    meter = UsageMeter(client)
    async with httpx.AsyncClient(transport=httpx.MockTransport(pages.handler)) as http:
        signals = LiveSignals(
            config(), ["a", "b"], registry, EndedRequests(meter),
            BulkBacklog(BatchStore(client), {"m": ["a", "b"]}, tokens_per_entry=1000), http, ["http://gw/metrics"],
        )  # fmt: skip
        first = (await signals.read(NOW))["a"]
        assert (first.ready, first.starting, first.draining) == (2, 1, 1)
        assert first.kv_used_fraction == 0.2  # (50 - 10 of flex's + 0) of 200 blocks on the ready servers
        assert first.waiting_requests == 3
        assert first.arrival_rates == {"priority": 0.0, "interactive": 0.0, "flex": 0.0}  # nothing to difference yet
        assert first.ttft_p99_s is None
        assert first.bulk == (BulkDemand(3500, deadline),)  # 7 pending × 1,000 tokens, half the model's pools

        # 10 s later: 12 interactive and 3 priority requests of model m ended (and 5 bulk, not
        # counted), 6 flex ended; a's engines hold 2 more interactive ones and 3 more flex: a's
        # share is 2 of the model's 3 ready servers.
        at = datetime.fromtimestamp(NOW + 5, UTC)
        for request_class, count in (("interactive", 12), ("priority", 3), ("flex", 6), ("bulk", 5)):
            for _ in range(count):
                await meter.record(UsageRecord(team_id="t", model_id="m", request_class=request_class), at)
        pages.pages["http://127.0.0.1:9012/metrics"] = server_metrics(100, 100, waiting=0, interactive=2, flex=3)
        pages.pages["http://gw/metrics"] = gateway_metrics({0.1: 15, 1.0: 20, float("inf"): 20})
        for server_id in ("a-0", "a-1", "a-2", "a-3", "b-0"):
            await registry.heartbeat(server_id, NOW + 10)
        second = await signals.read(NOW + 10)
        a, b = second["a"], second["b"]
        assert a.arrival_rates["interactive"] == (12 * 2 / 3 + 2) / 10
        assert a.arrival_rates["priority"] == (3 * 2 / 3) / 10
        assert a.arrival_rates["flex"] == (6 * 2 / 3 + 3) / 10
        assert a.demand_rate == (15 * 2 / 3 + 2) / 10  # flex asks for no server
        assert b.arrival_rates["interactive"] == (12 * 1 / 3) / 10
        assert b.demand_rate == (15 * 1 / 3) / 10
        assert second["a"].ttft_p99_s == 1.0  # 5 of the 10 new first tokens took over 0.1 s
    await client.aclose()
