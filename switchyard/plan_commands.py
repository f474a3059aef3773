"""`switchyard plan MODEL`: the sizing table for one copy of a model on the configured GPU.

The arithmetic is `build_engines.sizing`; this reads the model's record and the `gpu:` section
of switchyard.yaml, applies the command line's overrides and prints the inputs and results.
The brief's figures:

    switchyard plan large --weights-gb 40 --kv-bytes-per-token 500000 --reserve-gb 0 --kv-fraction 1
"""

from __future__ import annotations

import argparse
import sys

from build_engines.sizing import MB, Plan, PlanInputs, configured_plan_inputs, plan_model
from config.settings import SwitchyardConfig


def add_plan_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """`plan MODEL` and its overrides, run by `plan`."""
    parser = sub.add_parser("plan", help="print the KV cache and batch sizing of one copy of MODEL on a GPU")
    parser.add_argument("model_id", metavar="MODEL")
    parser.add_argument("--gpu-memory-gb", type=float, default=None, help="GPU memory (default: gpu.memory_gb)")
    parser.add_argument("--weights-gb", type=float, default=None, help="one copy's weights (default: the model's)")
    parser.add_argument("--gpus-per-copy", type=int, default=None, help="GPUs per copy (default: the model's)")
    parser.add_argument(
        "--kv-bytes-per-token", type=int, default=None, help="KV bytes per token (default: from the architecture)"
    )
    parser.add_argument("--avg-prompt-tokens", type=int, default=None, help="average prompt (default: 2,000)")
    parser.add_argument("--avg-reply-tokens", type=int, default=None, help="average reply (default: 300)")
    parser.add_argument(
        "--reserve-gb", type=float, default=None, help="runtime reserve (default: gpu.runtime_reserve_gb)"
    )
    parser.add_argument(
        "--kv-fraction", type=float, default=None, help="share of free memory for KV (default: gpu.kv_memory_fraction)"
    )
    parser.set_defaults(func=plan)
    return parser


def plan_inputs(config: SwitchyardConfig, args: argparse.Namespace) -> PlanInputs:
    """The model's and GPU's configured figures with the command line's overrides.
    Raises ValueError for an unknown model or one whose KV bytes per token are unknown."""
    return configured_plan_inputs(
        config,
        args.model_id,
        gpu_memory_gb=args.gpu_memory_gb,
        weights_gb=args.weights_gb,
        gpus_per_copy=args.gpus_per_copy,
        kv_bytes_per_token=args.kv_bytes_per_token,
        avg_prompt_tokens=args.avg_prompt_tokens,
        avg_reply_tokens=args.avg_reply_tokens,
        runtime_reserve_gb=args.reserve_gb,
        kv_memory_fraction=args.kv_fraction,
    )


def plan_table(model_id: str, plan: Plan) -> list[tuple[str, str, str]]:
    """(quantity, value, working) rows: the inputs first, then what follows from them."""
    i = plan.inputs
    gpus = i.gpus_per_copy
    return [
        ("model", model_id, f"{gpus} GPU(s) per copy"),
        ("GPU memory", f"{i.gpu_memory_gb:g} GB", "decimal GB"),
        ("weights per GPU", f"{plan.weights_gb_per_gpu:g} GB", f"{i.weights_gb:g} GB / {gpus}"),
        ("KV per token", f"{i.kv_bytes_per_token:,} B", f"{i.kv_bytes_per_token / MB:g} MB"),
        ("average request", f"{plan.avg_request_tokens:,} tokens", f"{i.avg_prompt_tokens:,} + {i.avg_reply_tokens:,}"),
        ("free after weights", f"{plan.free_gb_per_gpu:g} GB", f"{i.gpu_memory_gb:g} - {plan.weights_gb_per_gpu:g}"),
        (
            "tokens if all KV",
            f"{plan.tokens_after_weights_per_copy:,}",
            f"{plan.free_gb_per_gpu:g} GB x {gpus} / {i.kv_bytes_per_token / MB:g} MB",
        ),
        (
            "KV cache per GPU",
            f"{plan.kv_cache_gb_per_gpu:g} GB",
            f"({plan.free_gb_per_gpu:g} - {i.runtime_reserve_gb:g} reserve) x {i.kv_memory_fraction:g}",
        ),
        (
            "KV tokens per copy",
            f"{plan.kv_tokens_per_copy:,}",
            f"{plan.kv_cache_gb_per_gpu:g} GB x {gpus} / {i.kv_bytes_per_token / MB:g} MB",
        ),
        (
            "requests per copy",
            f"{plan.requests_per_copy:,.1f}",
            f"{plan.kv_tokens_per_copy:,} / {plan.avg_request_tokens:,}",
        ),
        ("max_batch_size", f"{plan.max_batch_size:,}", "requests rounded up to a multiple of 8"),
        ("max_num_tokens", f"{plan.max_num_tokens:,}", "prompt + batch, power of 2 in [2048, 8192]"),
    ]


def plan(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    """Print the sizing table of one copy of `args.model_id`; 2 for bad inputs."""
    try:
        result = plan_model(plan_inputs(config, args))
    except ValueError as exc:
        print(f"switchyard plan: {exc}", file=sys.stderr)
        return 2
    rows = [("quantity", "value", "working"), *plan_table(args.model_id, result)]
    widths = [max(len(row[col]) for row in rows) for col in range(2)]
    for quantity, value, working in rows:
        print(f"{quantity:<{widths[0]}}  {value:>{widths[1]}}  {working}")
    return 0
