"""The TensorRT-LLM release the GPU path is written against, and the LLM API keys it accepts.

`LLM(**args)` rejects an unknown keyword ("got invalid argument"), and a nested config rejects
unknown fields, so a generated model.yaml with a key the pinned release lacks would fail only on
a GPU host, minutes into loading. The lists below let `make test` catch that on any machine;
`switchyard gpu-check` compares them with the installed wheel's own field lists.

Source: `tensorrt_llm/llmapi/llm_args.py` of the 1.2 release line (NVIDIA/TensorRT-LLM):
`BaseLlmArgs` and `TorchLlmArgs` fields (the PyTorch backend, 1.x's default), `KvCacheConfig`
and `SchedulerConfig`. Only the keys Switchyard may write are listed, not every field: a key
added here must exist in that file. `priority` in `generate_async` and the scheduler's
`waiting_queue_policy` arrive in 1.3, so the 1.2 pin has neither (trtllm/engine_loop.py holds
bulk back itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRTLLM_VERSION = "1.2.0"
# The legacy path (TensorRT engines, C++ backend) exists up to the 1.2 releases; same pin.
LEGACY_MAX_VERSION = "1.2"
SUPPORTS_PRIORITY = False  # generate_async(priority=...) is 1.3+

LLM_API_KEYS = frozenset(
    {
        # BaseLlmArgs
        "model",
        "tokenizer",
        "skip_tokenizer_init",
        "trust_remote_code",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "dtype",
        "kv_cache_config",
        "enable_chunked_prefill",
        "scheduler_config",
        "max_batch_size",
        "max_input_len",
        "max_seq_len",
        "max_beam_width",
        "max_num_tokens",
        "backend",
        "return_perf_metrics",
        "iter_stats_max_iterations",
        "guided_decoding_backend",  # Literal["xgrammar", "llguidance"]; llguidance: PyTorch only
        # TorchLlmArgs
        "enable_iter_perf_stats",
        "print_iter_log",
        "cuda_graph_config",
        "disable_overlap_scheduler",
        "stream_interval",
    }
)
KV_CACHE_CONFIG_KEYS = frozenset(
    {
        "enable_block_reuse",
        "max_tokens",
        "free_gpu_memory_fraction",
        "tokens_per_block",
        "host_cache_size",
        "onboard_blocks",
        "enable_partial_reuse",
        "event_buffer_max_size",
    }
)
SCHEDULER_CONFIG_KEYS = frozenset({"capacity_scheduler_policy", "context_chunking_policy"})
CAPACITY_SCHEDULER_POLICIES = frozenset({"MAX_UTILIZATION", "GUARANTEED_NO_EVICT", "STATIC_BATCH"})
CONTEXT_CHUNKING_POLICIES = frozenset({"FIRST_COME_FIRST_SERVED", "EQUAL_PROGRESS"})


# `BaseLlmArgs.guided_decoding_backend: Optional[Literal["xgrammar", "llguidance"]]` (1.2); its
# llguidance backend takes a `grammar` guide as Lark (`grammar_matcher.LLGuidanceMatcherFactory`).
GUIDED_DECODING_BACKENDS = frozenset({"xgrammar", "llguidance"})


def llm_api_problems(args: Mapping[str, Any]) -> list[str]:
    """What in `args` (a model.yaml) the pinned LLM API would refuse; empty when nothing."""
    problems = [f"unknown LLM argument {key!r}" for key in sorted(set(args) - LLM_API_KEYS)]
    for section, known in (("kv_cache_config", KV_CACHE_CONFIG_KEYS), ("scheduler_config", SCHEDULER_CONFIG_KEYS)):
        value = args.get(section)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            problems.append(f"{section} must be a mapping, got {type(value).__name__}")
            continue
        problems += [f"unknown {section} field {key!r}" for key in sorted(set(value) - known)]
    scheduler = args.get("scheduler_config")
    if isinstance(scheduler, Mapping):
        for key, allowed in (
            ("capacity_scheduler_policy", CAPACITY_SCHEDULER_POLICIES),
            ("context_chunking_policy", CONTEXT_CHUNKING_POLICIES),
        ):
            if key in scheduler and scheduler[key] not in allowed:
                problems.append(f"scheduler_config.{key} {scheduler[key]!r} is not one of {sorted(allowed)}")
    backend = args.get("guided_decoding_backend")
    if backend is not None and backend not in GUIDED_DECODING_BACKENDS:
        problems.append(f"guided_decoding_backend {backend!r} is not one of {sorted(GUIDED_DECODING_BACKENDS)}")
    return problems
