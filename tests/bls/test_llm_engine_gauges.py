"""LlmEngineGauges: per-class counts of unfinished engine requests, and the heartbeat."""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import pytest

from bls.llm_engine_gauges import LlmEngineGauges
from bls.metrics import GaugeSample
from engine.request import EngineRequest, RequestClass, SamplingParams


class FakeMetric:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.values: list[float] = []

    def set(self, value: float) -> None:
        self.values.append(value)


class FakeMetricFamily:
    """`pb_utils.MetricFamily` as a recorder; every family made is kept in `created`."""

    GAUGE = "gauge"
    created: ClassVar[list[FakeMetricFamily]] = []

    def __init__(self, name: str, description: str, kind: Any) -> None:
        self.name, self.kind = name, kind
        self.metrics: list[FakeMetric] = []
        FakeMetricFamily.created.append(self)

    def Metric(self, labels: dict[str, str]) -> FakeMetric:
        metric = FakeMetric(labels)
        self.metrics.append(metric)
        return metric


class RecordingWriter:
    def __init__(self) -> None:
        self.beats: list[float] = []
        self.samples: list[GaugeSample] = []
        self.beaten = threading.Event()

    def set_gauge(self, sample: GaugeSample) -> None:
        self.samples.append(sample)

    def heartbeat(self, unix_time: float) -> None:
        self.beats.append(unix_time)
        if len(self.beats) >= 3:
            self.beaten.set()


def engine_request(request_id: str, request_class: RequestClass) -> EngineRequest:
    return EngineRequest(request_id, (1, 2), SamplingParams(max_tokens=4), request_class=request_class)


@pytest.fixture(autouse=True)
def fresh_families() -> None:
    FakeMetricFamily.created.clear()


def by_family(name: str) -> FakeMetricFamily:
    (family,) = [f for f in FakeMetricFamily.created if f.name == name]
    return family


def test_counts_unfinished_requests_by_class() -> None:
    gauges = LlmEngineGauges(RecordingWriter())
    a, b, c, p, f = (
        engine_request(i, k)
        for i, k in (
            ("a", RequestClass.INTERACTIVE),
            ("b", RequestClass.BULK),
            ("c", RequestClass.BULK),
            ("p", RequestClass.PRIORITY),
            ("f", RequestClass.FLEX),
        )
    )
    for r in (a, b, c, p, f):
        gauges.started(r)
    gauges.finished(b)
    assert gauges.counts() == {
        RequestClass.PRIORITY: 1,
        RequestClass.INTERACTIVE: 1,
        RequestClass.FLEX: 1,
        RequestClass.BULK: 1,
    }
    for r in (a, c, p, f):
        gauges.finished(r)
    assert gauges.counts() == dict.fromkeys(RequestClass, 0)
    with pytest.raises(AssertionError, match="more often than started"):
        gauges.finished(c)


def test_publish_sets_the_heartbeat_and_only_changed_class_gauges() -> None:
    clock = iter([1700000000.0, 1700000000.1, 1700000000.2])
    labels = {"model": "llm", "version": "1"}
    gauges = LlmEngineGauges.on_triton(FakeMetricFamily, labels, wall_clock=lambda: next(clock))
    gauges.publish()
    gauges.started(engine_request("a", RequestClass.BULK))
    gauges.publish()
    gauges.publish()
    # Only Switchyard's two families: the backend registers its own nv_trt_llm_* names.
    assert sorted(f.name for f in FakeMetricFamily.created) == [
        "switchyard_engine_heartbeat",
        "switchyard_engine_requests",
    ]
    (beat,) = by_family("switchyard_engine_heartbeat").metrics
    assert beat.labels == {"model": "llm", "version": "1"}
    assert beat.values == [1700000000.0, 1700000000.1, 1700000000.2]
    per_class = {m.labels["request_class"]: m for m in by_family("switchyard_engine_requests").metrics}
    assert per_class["bulk"].labels == {"request_class": "bulk", "model": "llm", "version": "1"}
    assert per_class["bulk"].values == [0, 1]  # set when it changed, not on every pass
    assert per_class["interactive"].values == [0]


def test_the_thread_beats_until_stopped() -> None:
    writer = RecordingWriter()
    gauges = LlmEngineGauges(writer, interval_s=0.01)
    gauges.start()
    try:
        assert writer.beaten.wait(5.0)
    finally:
        gauges.stop()
    beats = len(writer.beats)
    time.sleep(0.05)
    assert len(writer.beats) == beats  # stopped means no more beats
    assert {s.label for s in writer.samples} == {"priority", "interactive", "flex", "bulk"}
    with pytest.raises(RuntimeError, match="already started"):
        gauges.start()


def test_a_failing_write_does_not_stop_the_heartbeat() -> None:
    class FlakyWriter(RecordingWriter):
        def heartbeat(self, unix_time: float) -> None:
            super().heartbeat(unix_time)
            if len(self.beats) == 1:
                raise RuntimeError("metrics server busy")

    writer = FlakyWriter()
    gauges = LlmEngineGauges(writer, interval_s=0.01)
    gauges.start()
    try:
        assert writer.beaten.wait(5.0)
    finally:
        gauges.stop()


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        LlmEngineGauges(RecordingWriter(), interval_s=0)
