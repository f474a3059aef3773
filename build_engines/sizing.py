"""Sizing arithmetic for a GPU deployment: how much KV cache a copy of a model gets, how many
requests that holds, and the engine limits chosen from it (`switchyard plan MODEL`).

One GPU (one copy, gpus_per_copy = 1), decimal gigabytes as in the brief:

    |<------------------------ gpu_memory_gb ------------------------>|
    | weights / gpus_per_copy | runtime reserve |  KV cache  | spare  |
                              |<--- free after weights --->|
                                                |<- free - reserve ->|
                                                |<-- x kv_memory_fraction

    kv_tokens_per_copy = KV cache bytes x gpus_per_copy // kv_bytes_per_token
    requests_per_copy  = kv_tokens_per_copy / (avg_prompt_tokens + avg_reply_tokens)

The brief's figures are the idealised case where everything left after the weights is KV
(reserve 0, fraction 1): 80 GB - 40 GB = 40 GB; 40 GB / 0.5 MB = 80,000 tokens; 80,000 /
(2,000 + 300) = 34.8, about 35 requests. `tokens_after_weights_per_copy` keeps that number
beside the engine's real pool so the table shows both.

With tensor parallelism each GPU holds its share of the KV heads, so a token's bytes spread over
the copy's GPUs just as its weights do (exact when the KV heads divide evenly among the GPUs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from config.settings import Architecture, SwitchyardConfig

GB = 10**9  # decimal, as the brief counts (80 GB GPU, 0.5 MB a token)
MB = 10**6

DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "fp8": 1}

# The brief's average request: the lengths `requests_per_copy` is counted at.
BRIEF_AVG_PROMPT_TOKENS = 2_000
BRIEF_AVG_REPLY_TOKENS = 300

# TensorRT-LLM's own defaults (BuildConfig / LLM API) are the ceilings of what we choose.
MAX_BATCH_SIZE_CEILING = 2_048
MIN_NUM_TOKENS = 2_048
MAX_NUM_TOKENS_CEILING = 8_192
BATCH_SIZE_MULTIPLE = 8  # CUDA-graph batch sizes come in multiples of 8


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: str) -> int:
    """Bytes of KV cache one token holds: a K and a V vector per KV head in every layer.

    Llama-2-70B (80 layers, 8 KV heads of 128, fp16): 80 x 8 x 128 x 2 x 2 = 327,680 B."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    if min(num_layers, num_kv_heads, head_dim) < 1:
        raise ValueError("layers, KV heads and head dim must all be at least 1")
    return num_layers * num_kv_heads * head_dim * 2 * DTYPE_BYTES[dtype]


def kv_bytes_per_token_of(architecture: Architecture, dtype: str) -> int:
    """`kv_bytes_per_token` of a configured architecture (head dim = hidden / attention heads)."""
    head_dim = architecture.hidden_size // architecture.num_attention_heads
    return kv_bytes_per_token(architecture.num_hidden_layers, architecture.num_key_value_heads, head_dim, dtype)


@dataclass(frozen=True)
class PlanInputs:
    """Everything the plan depends on. Sizes in decimal GB; `kv_bytes_per_token` per copy."""

    gpu_memory_gb: float
    weights_gb: float  # one copy's weights, spread evenly over its GPUs
    kv_bytes_per_token: int
    gpus_per_copy: int = 1
    avg_prompt_tokens: int = BRIEF_AVG_PROMPT_TOKENS
    avg_reply_tokens: int = BRIEF_AVG_REPLY_TOKENS
    runtime_reserve_gb: float = 2.0
    kv_memory_fraction: float = 0.9

    def __post_init__(self) -> None:
        if self.gpu_memory_gb <= 0:
            raise ValueError(f"gpu_memory_gb must be positive, got {self.gpu_memory_gb}")
        if self.weights_gb < 0 or self.runtime_reserve_gb < 0:
            raise ValueError("weights_gb and runtime_reserve_gb must not be negative")
        if self.kv_bytes_per_token < 1 or self.gpus_per_copy < 1:
            raise ValueError("kv_bytes_per_token and gpus_per_copy must be at least 1")
        if self.avg_prompt_tokens < 1 or self.avg_reply_tokens < 0:
            raise ValueError("avg_prompt_tokens must be at least 1 and avg_reply_tokens not negative")
        if not 0 < self.kv_memory_fraction <= 1:
            raise ValueError(f"kv_memory_fraction must be in (0, 1], got {self.kv_memory_fraction}")


@dataclass(frozen=True)
class Plan:
    """The sizing of one copy of a model. Per-GPU figures are for each of its GPUs."""

    inputs: PlanInputs
    weights_gb_per_gpu: float
    free_gb_per_gpu: float  # after the weights
    tokens_after_weights_per_copy: int  # if all of it were KV: the brief's 80,000
    kv_cache_gb_per_gpu: float  # (free - reserve) x kv_memory_fraction
    kv_tokens_per_copy: int
    avg_request_tokens: int
    requests_per_copy: float  # at the average lengths; the brief's ~35
    max_batch_size: int
    max_num_tokens: int


def plan_model(inputs: PlanInputs) -> Plan:
    """Size one copy. Raises ValueError when the weights (with the reserve) leave no room,
    or when not even one average request fits in the KV cache."""
    gpus = inputs.gpus_per_copy
    weights_bytes_per_gpu = round(inputs.weights_gb * GB / gpus)
    free_bytes = round(inputs.gpu_memory_gb * GB) - weights_bytes_per_gpu
    reserve_bytes = round(inputs.runtime_reserve_gb * GB)
    if free_bytes <= reserve_bytes:
        raise ValueError(
            f"weights of {inputs.weights_gb:g} GB over {gpus} GPU(s) take {weights_bytes_per_gpu / GB:g} GB "
            f"of each {inputs.gpu_memory_gb:g} GB GPU; with the {inputs.runtime_reserve_gb:g} GB runtime reserve "
            "nothing is left for the KV cache: use more gpus_per_copy or a bigger GPU"
        )
    # Whole bytes before dividing, so the token counts are exact integers, not float noise.
    kv_cache_bytes = round((free_bytes - reserve_bytes) * inputs.kv_memory_fraction)
    kv_tokens = kv_cache_bytes * gpus // inputs.kv_bytes_per_token
    avg_request_tokens = inputs.avg_prompt_tokens + inputs.avg_reply_tokens
    requests = kv_tokens / avg_request_tokens
    if requests < 1:
        raise ValueError(
            f"the KV cache holds {kv_tokens:,} tokens per copy, less than one average request "
            f"({avg_request_tokens:,} tokens)"
        )
    max_batch_size = choose_max_batch_size(requests)
    return Plan(
        inputs=inputs,
        weights_gb_per_gpu=weights_bytes_per_gpu / GB,
        free_gb_per_gpu=free_bytes / GB,
        tokens_after_weights_per_copy=free_bytes * gpus // inputs.kv_bytes_per_token,
        kv_cache_gb_per_gpu=kv_cache_bytes / GB,
        kv_tokens_per_copy=kv_tokens,
        avg_request_tokens=avg_request_tokens,
        requests_per_copy=requests,
        max_batch_size=max_batch_size,
        max_num_tokens=choose_max_num_tokens(inputs.avg_prompt_tokens, max_batch_size),
    )


def choose_max_batch_size(requests_per_copy: float) -> int:
    """Requests that fit at the average lengths, rounded *up* to a multiple of 8.

    Up, not down: the scheduler admits a request only when its KV blocks are free, so memory is
    never over-committed by this cap; it only bounds concurrency, and when replies run shorter
    than average a few more requests should be able to use the room. Capped at TensorRT-LLM's
    default of 2,048."""
    rounded = math.ceil(requests_per_copy / BATCH_SIZE_MULTIPLE) * BATCH_SIZE_MULTIPLE
    return min(max(rounded, BATCH_SIZE_MULTIPLE), MAX_BATCH_SIZE_CEILING)


def choose_max_num_tokens(avg_prompt_tokens: int, max_batch_size: int) -> int:
    """The tokens one engine step may compute (the chunked-prefill budget): an average prompt in
    one chunk beside one decode token for every request in the batch, rounded up to a power of
    two and kept within [2,048, 8,192].

    Bigger steps prefill faster but make every running reply wait longer between tokens; longer
    prompts than the budget are prefilled in chunks across steps."""
    wanted = avg_prompt_tokens + max_batch_size
    power_of_two = 1 << (wanted - 1).bit_length()
    return min(max(power_of_two, MIN_NUM_TOKENS), MAX_NUM_TOKENS_CEILING)


def configured_plan_inputs(
    config: SwitchyardConfig,
    model_id: str,
    *,
    gpu_memory_gb: float | None = None,
    weights_gb: float | None = None,
    gpus_per_copy: int | None = None,
    kv_bytes_per_token: int | None = None,
    avg_prompt_tokens: int | None = None,
    avg_reply_tokens: int | None = None,
    runtime_reserve_gb: float | None = None,
    kv_memory_fraction: float | None = None,
) -> PlanInputs:
    """The plan inputs switchyard.yaml gives `model_id` (its record and the `gpu:` section);
    arguments that are not None replace them (`switchyard plan`'s options). Raises ValueError
    for an unknown model or one whose KV bytes per token cannot be known."""
    model = config.models.get(model_id)
    if model is None:
        raise ValueError(f"unknown model {model_id!r}; configured: {', '.join(config.models)}")
    kv_bytes = kv_bytes_per_token or model.kv_bytes_per_token
    if kv_bytes is None:
        if model.architecture is None:
            raise ValueError(
                f"model {model_id!r} has no architecture: set kv_bytes_per_token or pass --kv-bytes-per-token"
            )
        kv_bytes = kv_bytes_per_token_of(model.architecture, model.dtype)
    gpu = config.gpu
    return PlanInputs(
        gpu_memory_gb=gpu.memory_gb if gpu_memory_gb is None else gpu_memory_gb,
        weights_gb=model.weights_gb if weights_gb is None else weights_gb,
        kv_bytes_per_token=kv_bytes,
        gpus_per_copy=gpus_per_copy or model.gpus_per_copy,
        avg_prompt_tokens=avg_prompt_tokens or BRIEF_AVG_PROMPT_TOKENS,
        avg_reply_tokens=BRIEF_AVG_REPLY_TOKENS if avg_reply_tokens is None else avg_reply_tokens,
        runtime_reserve_gb=gpu.runtime_reserve_gb if runtime_reserve_gb is None else runtime_reserve_gb,
        kv_memory_fraction=gpu.kv_memory_fraction if kv_memory_fraction is None else kv_memory_fraction,
    )
