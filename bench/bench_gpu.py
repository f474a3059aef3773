"""`python -m bench gpu`: the live benchmarks S1, S3 and S4 on TensorRT-LLM, each headline
figure against its target in one table (bench/results/gpu_check.json).

The benchmark half of `switchyard gpu-check`, which checks the machine (a GPU, TensorRT-LLM,
tritonserver) and builds the `small` model, then runs this as a process of its own: the CLI
imports no benchmark, so none ships in the wheel. What the check found (the GPU, TensorRT-LLM's
version) comes in as `--meta` and is kept in the result.

Exit 0 when every figure with a target meets it; 1 when one misses, or a benchmark fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from bench.headlines import Headline, headlines
from bench.live_runs import run_live
from config.settings import ServingSpec, SwitchyardConfig, load_config
from report.result_files import write_result

BENCHES = ["s1", "s3", "s4"]
RESULT_NAME = "gpu_check"
GPU_STARTUP_S = 1800.0  # a server loading TensorRT-LLM gets this long before its start counts as failed

TrtllmEngine = Literal["llmapi", "legacy"]
LiveRunner = Callable[[list[str], SwitchyardConfig], dict[str, dict[str, object]]]


def trtllm_config(config: SwitchyardConfig, engine: TrtllmEngine) -> SwitchyardConfig:
    """`config` serving on TensorRT-LLM with `engine`, with time for TensorRT-LLM to load (CUDA
    graphs, autotuning: minutes, not the CPU engine's seconds); the rest as configured."""
    fleet = config.fleet.model_copy(update={"startup_timeout_s": max(config.fleet.startup_timeout_s, GPU_STARTUP_S)})
    return config.model_copy(update={"serving": ServingSpec(target="trtllm", trtllm_engine=engine), "fleet": fleet})


def run(config: SwitchyardConfig, engine: TrtllmEngine, meta: dict[str, object], live: LiveRunner) -> int:
    """S1, S3 and S4 run by `live` on `config` served by TensorRT-LLM (`engine`); their
    headlines written with `meta`; the exit code (module docstring)."""
    try:
        results = live(BENCHES, trtllm_config(config, engine))
    except Exception:  # a smoke check reports the failure whole, whatever raised it
        traceback.print_exc()
        print(f"bench gpu: the benchmarks failed on trtllm ({engine})", file=sys.stderr)
        return 1
    table = headlines(results)
    write_result(RESULT_NAME, [h.row() for h in table], {**meta, "serving": f"trtllm ({engine})"})
    return verdict(table)


def verdict(table: list[Headline]) -> int:
    """0 when every figure with a target meets it, else 1 (saying which missed)."""
    missed = [f"{h.bench}: {h.figure}" for h in table if h.met is False]
    if missed:
        print(f"bench gpu: targets missed: {'; '.join(missed)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["llmapi", "legacy"], default="llmapi", help="TensorRT-LLM engine")
    parser.add_argument("--config", type=Path, default=None, help="path to switchyard.yaml")
    parser.add_argument(
        "--meta", type=json.loads, default={}, help="a JSON object kept in the result's meta (what the check found)"
    )
    args = parser.parse_args(argv)
    if not isinstance(args.meta, dict):
        parser.error("--meta takes a JSON object")
    return run(load_config(args.config), args.engine, args.meta, run_live)
