"""The `model.yaml` of a pool's `tensorrt_llm` model: `tensorrt_llm.LLM`'s arguments, sized by
the plan (`switchyard plan MODEL`) and shaped by the pool's engine settings. This is the GPU
path: TensorRT-LLM's LLM API (the PyTorch backend, the only one upstream keeps) loads the HF
checkpoint directly, with no engine build.

    switchyard.yaml                         model.yaml (LLM(**args), TensorRT-LLM's PyTorch backend)
    ───────────────                         ───────────────────────────────────────────────────────
    models.M.weights_uri (local NVMe)   ──▶ model                 (the HF checkpoint folder)
    models.M.gpus_per_copy              ──▶ tensor_parallel_size
    models.M.dtype                      ──▶ dtype                 (fp8 checkpoints: auto)
    models.M.max_context_tokens         ──▶ max_seq_len, max_input_len
    plan: requests per copy             ──▶ max_batch_size        (rounded up to a multiple of 8)
    plan: prompt + batch                ──▶ max_num_tokens        (the chunked-prefill budget)
    plan: KV tokens per copy            ──▶ kv_cache_config.max_tokens
    gpu.kv_memory_fraction              ──▶ kv_cache_config.free_gpu_memory_fraction
    pools.P.engine.enable_prefix_caching──▶ kv_cache_config.enable_block_reuse
    pools.P.engine.enable_chunked_prefill─▶ enable_chunked_prefill
                                            iteration stats on (the KV and request gauges come
                                            from them), guided_decoding_backend: llguidance (the
                                            CPU engine's library: one grammar form,
                                            `guided_grammar`, on both)

Every key is a documented argument of the pinned release, of the documented type and within its
documented values (build_engines/llm_api_schema.py); a key that is not raises here, before any
GPU sees it. `skip_tokenizer_init` stays false: `llm` tokenizes and detokenizes (requests ask
`detokenize=False`), but the grammar matcher is built from the LLM's tokenizer and the PyTorch
backend refuses to load guided decoding without one. No `backend` key: it is deprecated, and
`tensorrt_llm.LLM` is the PyTorch LLM.

The executor keeps the smaller of `max_tokens` and what `free_gpu_memory_fraction` of the memory
free after loading holds, so a plan that guessed the runtime reserve too small cannot overcommit
the GPU. GUARANTEED_NO_EVICT admits a request only when its whole reply fits: nothing fails or is
evicted because a server took on too much.
"""

from __future__ import annotations

from typing import Any

from build_engines.llm_api_schema import llm_api_problems
from build_engines.sizing import Plan, configured_plan_inputs, plan_model
from config.settings import SwitchyardConfig

# TensorRT-LLM's own default; its attention kernels want a power of two.
GPU_TOKENS_PER_BLOCK = 32
_LLM_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "fp8": "auto"}


def pool_plan(config: SwitchyardConfig, pool_id: str) -> Plan:
    """The plan of one copy of the pool's model on the configured GPU."""
    return plan_model(configured_plan_inputs(config, config.pools[pool_id].model_id))


def llm_api_args(config: SwitchyardConfig, pool_id: str) -> dict[str, Any]:
    """model.yaml's content for `pool_id`. Raises ValueError when the plan does not fit or a key
    is one the pinned release would refuse (a bug here, caught before any GPU sees it)."""
    pool = config.pools[pool_id]
    model = config.models[pool.model_id]
    plan = pool_plan(config, pool_id)
    kv_cache_config: dict[str, Any] = {
        "enable_block_reuse": pool.engine.enable_prefix_caching,
        "free_gpu_memory_fraction": config.gpu.kv_memory_fraction,
        "max_tokens": plan.kv_tokens_per_copy,
        "tokens_per_block": GPU_TOKENS_PER_BLOCK,
    }
    scheduler_config: dict[str, Any] = {"capacity_scheduler_policy": "GUARANTEED_NO_EVICT"}
    if pool.engine.enable_chunked_prefill:
        scheduler_config["context_chunking_policy"] = "FIRST_COME_FIRST_SERVED"
    args: dict[str, Any] = {
        "model": str(config.model_dir(pool.model_id).resolve()),
        # The tokenizer loads from the checkpoint folder: guided decoding needs its vocabulary.
        "skip_tokenizer_init": False,
        "tensor_parallel_size": model.gpus_per_copy,
        "dtype": _LLM_DTYPES[model.dtype],
        "max_batch_size": plan.max_batch_size,
        "max_num_tokens": plan.max_num_tokens,
        "max_seq_len": model.max_context_tokens,
        "max_input_len": model.max_context_tokens,
        "enable_chunked_prefill": pool.engine.enable_chunked_prefill,
        "kv_cache_config": kv_cache_config,
        "scheduler_config": scheduler_config,
        "enable_iter_perf_stats": True,
        # Structured output: the `grammar` guide of TensorRT-LLM's llguidance backend is the Lark
        # that `guided_grammar` carries (PyTorch backend only, which this is).
        "guided_decoding_backend": "llguidance",
    }
    problems = llm_api_problems(args)
    if problems:
        raise ValueError(f"pool {pool_id!r}: model.yaml would be refused: {'; '.join(problems)}")
    return args
