"""`python -m bench short-request --quick`: a real one-worker gateway and Redis, the worker's
CPU and the Redis commands per short request written to bench/results/short_request.json."""

from __future__ import annotations

import pytest

from bench.bench_short_request import measure


@pytest.mark.integration
def test_a_small_run_measures_each_case() -> None:
    result = measure(30)
    rows = {row["case"]: row for row in result["rows"]}
    assert len(rows) == 4
    for row in rows.values():
        assert row["gateway_cpu_ms_per_request"] > 0
        # claim, reservation and the end's three scripts, whatever the reply's length
        assert 3 <= row["redis_commands_sent"] <= 12
        assert row["redis_commands_run"] >= row["redis_commands_sent"]
