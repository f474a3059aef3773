from __future__ import annotations

from typing import Any

import pytest

from bls.metrics import TritonEngineMetrics, gauge_samples
from engine.stats import EngineStats

STATS = EngineStats(
    max_blocks=100,
    free_blocks=90,
    used_blocks=10,
    tokens_per_block=16,
    reused_blocks=3,
    active_requests=2,
    max_requests=8,
    scheduled_requests=2,
    context_requests=1,
    waiting_requests=4,
    priority_requests=2,
    interactive_requests=1,
    flex_requests=3,
    bulk_requests=5,
    priority_blocks=7,
    interactive_blocks=4,
    flex_blocks=8,
    bulk_blocks=6,
    preemptions=(("priority", 0), ("interactive", 0), ("flex", 3), ("bulk", 9)),
)


class FakeMetric:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.value: float | None = None

    def set(self, value: float) -> None:
        self.value = value


class FakeMetricFamily:
    GAUGE = "gauge"

    def __init__(self, name: str, description: str, kind: Any) -> None:
        self.name, self.kind = name, kind
        self.metrics: list[FakeMetric] = []
        CREATED.append(self)

    def Metric(self, labels: dict[str, str]) -> FakeMetric:
        metric = FakeMetric(labels)
        self.metrics.append(metric)
        return metric


CREATED: list[FakeMetricFamily] = []


def test_samples_cover_every_label() -> None:
    values = {(s.family, s.label): s.value for s in gauge_samples(STATS)}
    assert values[("nv_trt_llm_kv_cache_block_metrics", "free")] == 90
    assert values[("nv_trt_llm_kv_cache_block_metrics", "tokens_per")] == 16
    assert values[("nv_trt_llm_request_metrics", "waiting")] == 4
    requests = {label: v for (family, label), v in values.items() if family == "switchyard_engine_requests"}
    assert requests == {"priority": 2, "interactive": 1, "flex": 3, "bulk": 5}
    blocks = {label: v for (family, label), v in values.items() if family == "switchyard_engine_kv_blocks"}
    assert blocks == {"priority": 7, "interactive": 4, "flex": 8, "bulk": 6}
    preempted = {label: v for (family, label), v in values.items() if family == "switchyard_engine_preemptions"}
    assert preempted == {"priority": 0, "interactive": 0, "flex": 3, "bulk": 9}
    assert len(values) == 22


def test_triton_publisher_sets_labelled_gauges() -> None:
    CREATED.clear()
    metrics = TritonEngineMetrics(FakeMetricFamily, {"model": "cpu_engine", "version": "1"})
    metrics.publish(STATS)
    idle = dict.fromkeys(("priority_blocks", "interactive_blocks", "flex_blocks", "bulk_blocks"), 0)
    metrics.publish(EngineStats(100, 100, 0, 16, 3, 0, 8, 0, 0, 0, **idle))
    families = {f.name: f for f in CREATED}
    assert set(families) == {
        "nv_trt_llm_kv_cache_block_metrics",
        "nv_trt_llm_request_metrics",
        "switchyard_engine_requests",
        "switchyard_engine_kv_blocks",
        "switchyard_engine_preemptions",
        "switchyard_engine_heartbeat",
    }
    assert all(f.kind == "gauge" for f in families.values())
    kv = {m.labels["kv_cache_block_type"]: m for m in families["nv_trt_llm_kv_cache_block_metrics"].metrics}
    assert kv["free"].value == 100 and kv["used"].value == 0
    assert kv["max"].labels == {"kv_cache_block_type": "max", "model": "cpu_engine", "version": "1"}
    assert len(families["nv_trt_llm_request_metrics"].metrics) == 5  # created once, then updated
    by_class = {m.labels["request_class"]: m.value for m in families["switchyard_engine_requests"].metrics}
    assert by_class == {"priority": 0, "interactive": 0, "flex": 0, "bulk": 0}
    blocks = {m.labels["request_class"]: m.value for m in families["switchyard_engine_kv_blocks"].metrics}
    assert blocks == {"priority": 0, "interactive": 0, "flex": 0, "bulk": 0}
    preempted = {m.labels["request_class"]: m.value for m in families["switchyard_engine_preemptions"].metrics}
    assert preempted == {"priority": 0, "interactive": 0, "flex": 3, "bulk": 9}  # the second stats had none to say


def test_an_engine_that_cannot_tell_kv_by_class_exports_no_such_gauge() -> None:
    """TensorRT-LLM's stats have no KV by class: no gauge, so the router counts none of its
    bulk as room for people (a 0 would say bulk holds nothing there)."""
    CREATED.clear()
    stats = EngineStats(100, 80, 20, 16, 3, 2, 8, 2, 1, 4, interactive_requests=1, bulk_requests=1)
    assert stats.class_kv_metrics() == {}
    TritonEngineMetrics(FakeMetricFamily, {}).publish(stats)
    (blocks,) = [f for f in CREATED if f.name == "switchyard_engine_kv_blocks"]
    assert blocks.metrics == []


def test_only_changed_values_are_set() -> None:
    CREATED.clear()
    metrics = TritonEngineMetrics(FakeMetricFamily, {})
    metrics.publish(STATS)
    kv = {m.labels["kv_cache_block_type"]: m for m in CREATED[0].metrics}
    kv["max"].value = None  # would be set again only if publish re-sent it
    metrics.publish(EngineStats(100, 80, 20, 16, 3, 2, 8, 2, 1, 4))
    assert kv["max"].value is None
    assert kv["free"].value == 80


def test_heartbeat_sets_one_gauge_with_the_model_labels() -> None:
    CREATED.clear()
    metrics = TritonEngineMetrics(FakeMetricFamily, {"model": "cpu_engine", "version": "1"})
    metrics.heartbeat(1700000000.25)
    metrics.heartbeat(1700000000.5)
    (family,) = [f for f in CREATED if f.name == "switchyard_engine_heartbeat"]
    (gauge,) = family.metrics
    assert gauge.labels == {"model": "cpu_engine", "version": "1"}
    assert gauge.value == 1700000000.5


def test_a_publisher_can_own_some_families_only() -> None:
    CREATED.clear()
    metrics = TritonEngineMetrics(FakeMetricFamily, {}, families=("switchyard_engine_requests",))
    metrics.publish(STATS)  # the families it does not own are left to whoever owns them
    assert sorted(f.name for f in CREATED) == ["switchyard_engine_heartbeat", "switchyard_engine_requests"]
    (requests,) = [f for f in CREATED if f.name == "switchyard_engine_requests"]
    by_class = {m.labels["request_class"]: m.value for m in requests.metrics}
    assert by_class == {"priority": 2, "interactive": 1, "flex": 3, "bulk": 5}
    with pytest.raises(ValueError, match="unknown metric families"):
        TritonEngineMetrics(FakeMetricFamily, {}, families=("nv_trt_llm_typo",))
