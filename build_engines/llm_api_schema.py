"""The LLM API arguments a generated `model.yaml` may hold, as TensorRT-LLM documents them.

`tensorrt_llm.LLM(**args)` validates its arguments as pydantic models that forbid unknown
fields, so a key the installed release lacks, or a value of the wrong kind, fails only on a GPU
host, minutes into loading. Nobody here has a GPU, so the generated file is held to this record
instead, on every machine (`make test`), and `switchyard gpu-check` compares the names with the
installed wheel's own field lists.

Where each entry comes from, in TensorRT-LLM (NVIDIA/TensorRT-LLM) at the pinned release
(`build_engines/trtllm_pin.py`):

    tensorrt_llm/llmapi/llm_args.py      BaseLlmArgs, TorchLlmArgs (the PyTorch backend, the
                                         only one from 1.0 on), KvCacheConfig, SchedulerConfig,
                                         CapacitySchedulerPolicy, ContextChunkingPolicy
    tests/unittest/api_stability/        references_committed/llm.yaml (stable arguments) and
                                         references/llm.yaml (beta and prototype ones): the
                                         release's own record of `LLM()`'s signature
    https://nvidia.github.io/TensorRT-LLM/llm-api/reference.html   TorchLlmArgs, KvCacheConfig,
                                         SchedulerConfig (the same fields, rendered)

`status` is TensorRT-LLM's own label: it logs a warning at load for a beta or prototype knob
that is set. Only what Switchyard may write is listed; a key added here must exist in those
files, with that type. Deliberately absent:

    backend               deprecated and hidden from the reference; `LLM` is the PyTorch LLM
    triton_config         the upstream Triton LLM-API model's own section (its model.py strips
                          it); our `tensorrt_llm` model passes every key to `LLM`
    build_config          TensorRT engines only (the removed backend)
    scheduler_config.waiting_queue_policy   and `generate_async(priority=...)`: 1.3 on
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class LlmArg:
    """One documented argument: its dotted path in model.yaml, the class that declares it, the
    kind of value it takes and, where the release restricts them, the values or bounds."""

    path: str  # "max_batch_size", "kv_cache_config.max_tokens"
    owner: str  # the class in llm_args.py that declares the field
    kind: type  # bool, int, float, str, or dict for a nested config
    status: str = "stable"  # TensorRT-LLM's label: stable | beta | prototype
    choices: frozenset[str] | None = None  # a Literal or an enum's values
    minimum: float | None = None
    maximum: float | None = None

    @property
    def section(self) -> str | None:
        """The nested config this argument sits in, None at the top level."""
        return self.path.rpartition(".")[0] or None

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]


CAPACITY_SCHEDULER_POLICIES = frozenset({"MAX_UTILIZATION", "GUARANTEED_NO_EVICT", "STATIC_BATCH"})
CONTEXT_CHUNKING_POLICIES = frozenset({"FIRST_COME_FIRST_SERVED", "EQUAL_PROGRESS"})
# `guided_decoding_backend: Optional[Literal["xgrammar", "llguidance"]]`; llguidance takes a
# `grammar` guide as Lark, the CPU engine's form (PyTorch backend only, which this is).
GUIDED_DECODING_BACKENDS = frozenset({"xgrammar", "llguidance"})
# `dtype: str`: the float names the loader maps to torch dtypes, or `auto` (the checkpoint's).
MODEL_DTYPES = frozenset({"auto", "float16", "bfloat16", "float32"})

DOCUMENTED_ARGS: tuple[LlmArg, ...] = (
    LlmArg("model", "BaseLlmArgs", str),
    LlmArg("tokenizer", "BaseLlmArgs", str),
    LlmArg("skip_tokenizer_init", "BaseLlmArgs", bool),
    LlmArg("trust_remote_code", "BaseLlmArgs", bool),
    LlmArg("tensor_parallel_size", "BaseLlmArgs", int, minimum=1),
    LlmArg("pipeline_parallel_size", "BaseLlmArgs", int, minimum=1),
    LlmArg("dtype", "BaseLlmArgs", str, choices=MODEL_DTYPES),
    LlmArg("max_batch_size", "BaseLlmArgs", int, minimum=1),
    LlmArg("max_input_len", "BaseLlmArgs", int, minimum=1),
    LlmArg("max_seq_len", "BaseLlmArgs", int, minimum=1),
    LlmArg("max_beam_width", "BaseLlmArgs", int, minimum=1),
    LlmArg("max_num_tokens", "BaseLlmArgs", int, minimum=1),
    LlmArg("enable_chunked_prefill", "BaseLlmArgs", bool),
    LlmArg("guided_decoding_backend", "BaseLlmArgs", str, choices=GUIDED_DECODING_BACKENDS),
    LlmArg("iter_stats_max_iterations", "BaseLlmArgs", int, "prototype", minimum=0),
    LlmArg("return_perf_metrics", "BaseLlmArgs", bool, "prototype"),
    LlmArg("kv_cache_config", "BaseLlmArgs", dict),
    LlmArg("kv_cache_config.enable_block_reuse", "KvCacheConfig", bool),
    LlmArg("kv_cache_config.max_tokens", "KvCacheConfig", int, minimum=1),
    LlmArg("kv_cache_config.free_gpu_memory_fraction", "KvCacheConfig", float, minimum=0.0, maximum=1.0),
    # "a power of two greater than 1" (docs/source/features/kvcache.md); 32 by default.
    LlmArg("kv_cache_config.tokens_per_block", "KvCacheConfig", int, minimum=2),
    LlmArg("kv_cache_config.host_cache_size", "KvCacheConfig", int, minimum=0),
    LlmArg("kv_cache_config.enable_partial_reuse", "KvCacheConfig", bool),
    LlmArg("kv_cache_config.event_buffer_max_size", "KvCacheConfig", int, minimum=0),
    LlmArg("scheduler_config", "BaseLlmArgs", dict, "prototype"),
    LlmArg("scheduler_config.capacity_scheduler_policy", "SchedulerConfig", str, choices=CAPACITY_SCHEDULER_POLICIES),
    LlmArg("scheduler_config.context_chunking_policy", "SchedulerConfig", str, choices=CONTEXT_CHUNKING_POLICIES),
    LlmArg("enable_iter_perf_stats", "TorchLlmArgs", bool, "prototype"),
    LlmArg("print_iter_log", "TorchLlmArgs", bool, "beta"),
    LlmArg("disable_overlap_scheduler", "TorchLlmArgs", bool, "beta"),
    LlmArg("stream_interval", "TorchLlmArgs", int, minimum=1),
)
ARGS_BY_PATH: dict[str, LlmArg] = {arg.path: arg for arg in DOCUMENTED_ARGS}
SECTIONS = tuple(arg.path for arg in DOCUMENTED_ARGS if arg.kind is dict)


def keys_of(section: str | None) -> frozenset[str]:
    """The documented names at the top level (None) or inside one nested config."""
    return frozenset(arg.name for arg in DOCUMENTED_ARGS if arg.section == section)


def llm_api_problems(args: Mapping[str, Any]) -> list[str]:
    """What in `args` (a model.yaml) the pinned LLM API would refuse or mistake; empty when
    nothing. Unknown keys, values of another kind, values outside the documented set or bounds,
    and combinations the release cannot load."""
    problems = _section_problems(args, None)
    for section in SECTIONS:
        value = args.get(section)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            problems.append(f"{section} must be a mapping, got {type(value).__name__}")
            continue
        problems += _section_problems(value, section)
    return problems + _combination_problems(args)


def _section_problems(values: Mapping[str, Any], section: str | None) -> list[str]:
    problems = []
    for key in sorted(values):
        path = key if section is None else f"{section}.{key}"
        arg = ARGS_BY_PATH.get(path)
        if arg is None:
            where = "LLM argument" if section is None else f"{section} field"
            problems.append(f"unknown {where} {key!r}")
        elif arg.kind is not dict:
            problems += _value_problems(arg, values[key])
    return problems


def _value_problems(arg: LlmArg, value: object) -> list[str]:
    if not _is_kind(value, arg.kind):
        return [f"{arg.path} must be {arg.kind.__name__}, got {value!r}"]
    if arg.choices is not None and value not in arg.choices:
        return [f"{arg.path} {value!r} is not one of {sorted(arg.choices)}"]
    if isinstance(value, int | float) and not isinstance(value, bool):
        if arg.minimum is not None and value < arg.minimum:
            return [f"{arg.path} {value!r} is below {arg.minimum!r}"]
        if arg.maximum is not None and value > arg.maximum:
            return [f"{arg.path} {value!r} is above {arg.maximum!r}"]
    return []


def _is_kind(value: object, kind: type) -> bool:
    """The kind as YAML gives a value back: a bool is no int here, an int is a float."""
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, int | float)
    return isinstance(value, kind)


def _combination_problems(args: Mapping[str, Any]) -> list[str]:
    """Rules across keys. The PyTorch backend builds its grammar matcher from the LLM's
    tokenizer (`get_guided_decoding_config` in tensorrt_llm/_torch/pyexecutor/
    py_executor_creator.py asserts one), and `skip_tokenizer_init` leaves it None."""
    if args.get("guided_decoding_backend") is not None and args.get("skip_tokenizer_init") is True:
        return ["guided_decoding_backend needs the LLM's tokenizer: skip_tokenizer_init must be false"]
    return []
