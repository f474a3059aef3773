"""What one server's engines hold per request class, as the autoscaler reads it from /metrics:
requests (`switchyard_engine_requests`) and the KV tokens flex holds
(`switchyard_engine_kv_blocks` × the engine's tokens per block).

Flex fills what runs (`demand_classes.py`): its KV is left out of the KV use that asks for
servers. A server that exports no flex KV (an engine without the tiers) holds none.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from contracts.metric_names import CLASS_METRIC, KV_CACHE_BLOCK_METRIC, KV_CLASS_METRIC
from contracts.service_tier import REQUEST_CLASSES, RequestClass

_FAMILIES = (CLASS_METRIC, KV_CLASS_METRIC, KV_CACHE_BLOCK_METRIC)
_PREFIXES = tuple(f"{name}{end}" for name in _FAMILIES for end in ("{", " "))


@dataclass(frozen=True, slots=True)
class EngineClasses:
    requests: dict[RequestClass, int]  # in the engines, admitted or waiting (a class not exported: absent)
    flex_kv_tokens: int  # KV held by admitted flex requests


def parse_engine_classes(metrics_text: str) -> EngineClasses:
    """The requests per class and flex's KV in one server's metrics text (only those families'
    lines are parsed)."""
    classes: dict[str, RequestClass] = {c: c for c in REQUEST_CLASSES}
    lines = "\n".join(line for line in metrics_text.splitlines() if line.startswith(_PREFIXES))
    counts: dict[RequestClass, int] = {}
    flex_blocks: dict[tuple[tuple[str, str], ...], float] = {}  # per engine (its other labels)
    tokens_per: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(lines + "\n"):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == CLASS_METRIC and (request_class := classes.get(labels.get("request_class", ""))):
                counts[request_class] = counts.get(request_class, 0) + int(sample.value)
            elif sample.name == KV_CLASS_METRIC and labels.get("request_class") == "flex":
                flex_blocks[_engine(labels, "request_class")] = sample.value
            elif sample.name == KV_CACHE_BLOCK_METRIC and labels.get("kv_cache_block_type") == "tokens_per":
                tokens_per[_engine(labels, "kv_cache_block_type")] = sample.value
    flex = sum(blocks * tokens_per.get(engine, 0.0) for engine, blocks in flex_blocks.items())
    return EngineClasses(counts, int(flex))


def _engine(labels: dict[str, str], own: str) -> tuple[tuple[str, str], ...]:
    """An engine's identity: its labels but the family's own."""
    return tuple(sorted((k, v) for k, v in labels.items() if k != own))
