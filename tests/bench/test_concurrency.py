"""The concurrency bench end to end at a tiny size: a real Redis, the two-worker paced gateway,
client processes of SSE and gRPC streams, the flood; every row measured and no errors."""

from __future__ import annotations

import pytest

from bench.bench_concurrency import Plan, bystander_streams, flood_share, measure, scaled
from config.settings import GatewaySpec

TINY = Plan(steps=(50,), door_streams=1, hold_s=3.0, max_streams_per_worker=50, probes=3)


def test_scaled_plans_keep_the_full_shape() -> None:
    quick = scaled(200, 5.0)
    assert quick.steps == (20, 50, 100, 200) and quick.door_streams == 40
    assert quick.max_streams_per_worker == 200 and quick.hold_s == 5.0


@pytest.mark.integration
def test_a_tiny_run_measures_every_step_without_errors() -> None:
    result = measure(TINY)
    flood = 3 * flood_share(TINY) * TINY.workers
    beside = bystander_streams(TINY)
    rows = {row["step"]: row for row in result["rows"]}
    assert list(rows) == ["sse 50", "grpc 1", f"flood {flood}+{beside}"]
    assert rows["sse 50"]["streams"] == 50 and rows["grpc 1"]["streams"] == 1
    for row in rows.values():
        assert row["errors"] == 0, row["error_kinds"]
        assert row["bystander_errors"] == 0, row.get("bystander_error_kinds")
        assert row["ttft_p50_ms"] > 0 and row["ttft_p99_ms"] >= row["ttft_p50_ms"]
        assert row["lag_p99_ms_w0"] is not None and row["lag_p99_ms_w1"] is not None
        assert row["redis_conns_w0"] >= 1 and row["redis_conns_w1"] >= 1  # each worker's own pool
        assert row["fds_w0"] > 0 and row["cpu_pct_per_1k_streams"] is not None
        assert row["close_s"] is not None and row["quiet_s"] is not None  # closed, then at rest
        assert row["workers_lost"] == 0
    flooded = rows[f"flood {flood}+{beside}"]
    if "max_streams_per_worker" in GatewaySpec.model_fields:
        # Past the borrowing limit (45 of 50 per worker) the flooder is refused, the bystander not.
        assert flooded["expected_429"] >= flood - 2 * 45
        assert flooded["streams"] == flood + beside - flooded["expected_429"]
    meta = result["meta"]
    assert meta["failed"] is None and meta["idle_ttft_p50_ms"] > 0
    assert len(meta["workers_at_start"]) == 2 and meta["workers_at_end"] == meta["workers_at_start"]
    assert meta["gateway_settings"]["max_streams_per_key"] >= 1_000_000
