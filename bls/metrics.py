"""Engine gauges under TensorRT-LLM's metric names, so the router reads either engine the same.

    nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max|free|used|tokens_per|reused"}
    nv_trt_llm_request_metrics{request_type="active|max|scheduled|context|waiting"}
    switchyard_engine_requests{request_class="priority|interactive|flex|bulk"}    (Switchyard's own)
    switchyard_engine_kv_blocks{request_class="priority|interactive|flex|bulk"}   (Switchyard's own)
    switchyard_engine_heartbeat                  Unix time of the host's latest pass (liveness)

Triton serves them on its metrics port next to its own `nv_inference_*` metrics. The Triton
side goes through `pb_utils.MetricFamily`, passed in, so tests use a fake.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from contracts.metric_names import (
    CLASS_METRIC,
    HEARTBEAT_METRIC,
    KV_CACHE_BLOCK_METRIC,
    KV_CLASS_METRIC,
    PREEMPTION_METRIC,
    REQUEST_METRIC,
)
from engine.stats import EngineStats

_LABELS = {
    KV_CACHE_BLOCK_METRIC: "kv_cache_block_type",
    REQUEST_METRIC: "request_type",
    CLASS_METRIC: "request_class",
    KV_CLASS_METRIC: "request_class",
    PREEMPTION_METRIC: "request_class",
}
_DESCRIPTIONS = {
    KV_CACHE_BLOCK_METRIC: "KV cache blocks of the engine, by kind (TensorRT-LLM backend names)",
    REQUEST_METRIC: "Requests in the engine, by state (TensorRT-LLM backend names)",
    CLASS_METRIC: "Requests in the engine (admitted or waiting), by class",
    KV_CLASS_METRIC: "KV cache blocks held by admitted requests, by class (flex's and bulk's may be preempted)",
    PREEMPTION_METRIC: "Sequences preempted (KV freed, read again later) since the engine started, by their class",
}


@dataclass(frozen=True, slots=True)
class GaugeSample:
    family: str
    label: str  # the value of the family's one label (kv_cache_block_type or request_type)
    value: float


def gauge_samples(stats: EngineStats) -> list[GaugeSample]:
    """Every gauge value `stats` implies, in a fixed order."""
    samples = [GaugeSample(KV_CACHE_BLOCK_METRIC, k, v) for k, v in stats.kv_cache_block_metrics().items()]
    samples += [GaugeSample(REQUEST_METRIC, k, v) for k, v in stats.request_metrics().items()]
    samples += [GaugeSample(CLASS_METRIC, k, v) for k, v in stats.class_metrics().items()]
    samples += [GaugeSample(KV_CLASS_METRIC, k, v) for k, v in stats.class_kv_metrics().items()]
    samples += [GaugeSample(PREEMPTION_METRIC, k, v) for k, v in stats.class_preemption_metrics().items()]
    return samples


class MetricsPublisher(Protocol):
    """Where an engine host reports its stats, and that it is still alive."""

    def publish(self, stats: EngineStats) -> None: ...

    def heartbeat(self, unix_time: float) -> None:
        """The host made a pass at `unix_time`: a gauge that keeps advancing while it lives."""


class TritonEngineMetrics:
    """Publishes EngineStats through Triton's custom metrics API.

    `metric_family` is `pb_utils.MetricFamily`; `extra_labels` are added to every gauge
    (Triton's TRT-LLM backend labels its metrics with `model` and `version`, so we do too).
    Gauges are created lazily, on the first publish, from the labels EngineStats reports.
    Setting a gauge is a round trip to the Triton server, so only changed values are set:
    publishing after every engine step is cheap.
    """

    def __init__(
        self, metric_family: Any, extra_labels: Mapping[str, str], *, families: Collection[str] = tuple(_LABELS)
    ) -> None:
        """`families` limits the labelled families this publisher owns: a model that sits next
        to TensorRT-LLM's backend must not register the backend's own names a second time."""
        unknown = sorted(set(families) - set(_LABELS))
        if unknown:
            raise ValueError(f"unknown metric families {unknown}; known: {sorted(_LABELS)}")
        self._families = {
            name: metric_family(name=name, description=_DESCRIPTIONS[name], kind=metric_family.GAUGE)
            for name in families
        }
        self._extra_labels = dict(extra_labels)
        self._gauges: dict[tuple[str, str], Any] = {}
        self._values: dict[tuple[str, str], float] = {}
        # Triton drops a family's gauges once the family object is freed: keep it.
        self._heartbeat_family = metric_family(
            name=HEARTBEAT_METRIC,
            description="Unix time of the engine host's latest pass; advances while the model's stub is alive",
            kind=metric_family.GAUGE,
        )
        self._heartbeat = self._heartbeat_family.Metric(labels=self._extra_labels)

    def publish(self, stats: EngineStats) -> None:
        for sample in gauge_samples(stats):
            if sample.family in self._families:
                self.set_gauge(sample)

    def set_gauge(self, sample: GaugeSample) -> None:
        """Set one labelled gauge (created on first use); a no-op when the value is unchanged."""
        key = (sample.family, sample.label)
        if self._values.get(key) == sample.value:
            return
        gauge = self._gauges.get(key)
        if gauge is None:
            labels = {_LABELS[sample.family]: sample.label, **self._extra_labels}
            gauge = self._gauges[key] = self._families[sample.family].Metric(labels=labels)
        gauge.set(sample.value)
        self._values[key] = sample.value

    def heartbeat(self, unix_time: float) -> None:
        self._heartbeat.set(unix_time)
