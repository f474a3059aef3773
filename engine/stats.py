"""A snapshot of one engine's load, in the shape TensorRT-LLM's metrics report it.

The router scores servers from these numbers whichever engine runs there, so the fields map
one to one onto the labels of TensorRT-LLM's Triton backend metrics (their names and parsers are
in contracts/metric_names.py; bls/metrics.py exports them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Immutable, so a step thread can publish it and any thread can read it without a lock."""

    max_blocks: int
    # Free includes cached blocks nobody holds: they are evicted on demand, so they are room.
    free_blocks: int
    used_blocks: int
    tokens_per_block: int
    reused_blocks: int  # cumulative prefix-cache block hits since start
    active_requests: int  # admitted: holding KV, scheduled whenever the budget allows
    max_requests: int  # most requests admitted at once (max_num_seqs)
    scheduled_requests: int  # planned in the last step
    context_requests: int  # of those, the ones still reading their prompt
    waiting_requests: int  # queued for admission, preempted ones included
    # Unfinished (admitted or waiting) requests, by class.
    priority_requests: int = 0
    interactive_requests: int = 0
    flex_requests: int = 0
    bulk_requests: int = 0
    # KV blocks held by admitted requests, by class; None from an engine that does not preempt
    # by class (TensorRT-LLM's), which then exports no such gauge.
    priority_blocks: int | None = None
    interactive_blocks: int | None = None
    flex_blocks: int | None = None
    bulk_blocks: int | None = None
    # Sequences preempted since the engine started (their KV freed, read again later), by the
    # preempted one's class; None from an engine that does not say (TensorRT-LLM's).
    preemptions: tuple[tuple[str, int], ...] | None = None

    def kv_cache_block_metrics(self) -> dict[str, int]:
        """Values of `nv_trt_llm_kv_cache_block_metrics` by `kv_cache_block_type` label."""
        return {
            "max": self.max_blocks,
            "free": self.free_blocks,
            "used": self.used_blocks,
            "tokens_per": self.tokens_per_block,
            "reused": self.reused_blocks,
        }

    def request_metrics(self) -> dict[str, int]:
        """Values of `nv_trt_llm_request_metrics` by `request_type` label."""
        return {
            "active": self.active_requests,
            "max": self.max_requests,
            "scheduled": self.scheduled_requests,
            "context": self.context_requests,
            "waiting": self.waiting_requests,
        }

    def class_metrics(self) -> dict[str, int]:
        """Values of `switchyard_engine_requests` by `request_class` label, highest class first."""
        return {
            "priority": self.priority_requests,
            "interactive": self.interactive_requests,
            "flex": self.flex_requests,
            "bulk": self.bulk_requests,
        }

    def class_kv_metrics(self) -> dict[str, int]:
        """Values of `switchyard_engine_kv_blocks` by `request_class` label (none where unknown).

        Flex's and bulk's are what a person's request (priority, interactive) may preempt."""
        blocks = {
            "priority": self.priority_blocks,
            "interactive": self.interactive_blocks,
            "flex": self.flex_blocks,
            "bulk": self.bulk_blocks,
        }
        return {label: count for label, count in blocks.items() if count is not None}

    def class_preemption_metrics(self) -> dict[str, int]:
        """Values of `switchyard_engine_preemptions` by `request_class` label (none where unknown)."""
        return dict(self.preemptions or ())
