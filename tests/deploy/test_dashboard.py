"""deploy/grafana/switchyard.json: it loads, and every metric its panels query is one the code
exports (a renamed metric would otherwise leave a silently empty panel)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "switchyard.json"
METRIC_SOURCES = ("serving/metrics.py", "bulk/metrics.py", "contracts/metric_names.py", "bls/metrics.py")
METRIC_NAME = re.compile(r"\b(?:switchyard|nv)_[a-z0-9_]+")
# Suffixes Prometheus adds to a counter's or histogram's samples.
SAMPLE_SUFFIXES = ("_bucket", "_sum", "_count", "_total")


def _exported_metrics() -> set[str]:
    names: set[str] = set()
    for source in METRIC_SOURCES:
        names |= set(re.findall(r"\"((?:switchyard|nv)_[a-z0-9_]+)\"", (REPO / source).read_text()))
    return names


def _family(sample_name: str, exported: set[str]) -> str:
    if sample_name in exported:
        return sample_name
    for suffix in SAMPLE_SUFFIXES:
        if sample_name.endswith(suffix) and sample_name.removesuffix(suffix) in exported:
            return sample_name.removesuffix(suffix)
    raise AssertionError(f"{sample_name!r} is not a metric any of {METRIC_SOURCES} exports")


def _panels() -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = json.loads(DASHBOARD.read_text())["panels"]
    return panels


def test_every_queried_metric_is_exported() -> None:
    exported = _exported_metrics()
    assert {"switchyard_gateway_time_to_first_token_seconds", "switchyard_bulk_pending_entries"} <= exported
    expressions = [target["expr"] for panel in _panels() for target in panel["targets"]]
    queried = {_family(name, exported) for expr in expressions for name in METRIC_NAME.findall(expr)}
    assert queried >= {
        "switchyard_gateway_time_to_first_token_seconds",
        "switchyard_gateway_inter_token_seconds",
        "nv_trt_llm_kv_cache_block_metrics",
        "switchyard_gateway_queued_requests",
        "switchyard_gateway_team_requests",
        "switchyard_bulk_pending_entries",
        "switchyard_bulk_batches_at_risk",
    }


def test_an_unknown_metric_is_caught() -> None:
    exported = _exported_metrics()
    assert _family("switchyard_gateway_requests_total", exported) == "switchyard_gateway_requests"
    try:
        _family("switchyard_gateway_queue_depth", exported)
    except AssertionError:
        return
    raise AssertionError("an unknown metric passed")


def test_panels_are_well_formed() -> None:
    panels = _panels()
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["targets"], panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
