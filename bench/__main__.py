"""`make bench` / `python -m bench [NAME ...]`: run the benchmarks, each writing
`bench/results/<name>.json` and printing its table.

The live benchmarks share one stack (gateway + one Triton server per bench pool) on free
ports, so every ratio compares variants measured side by side in the same run.
"""

from __future__ import annotations

import argparse
import sys

from bench import (
    bench_prefill,
    bench_s1_short_behind_long,
    bench_s2_document_full_server,
    bench_s3_prefill_stutter,
    bench_schedule,
    bench_serving_overhead,
)
from bench.live import bench_config, start_stack
from switchyard.config import EngineSpec, load_config

OFFLINE = {"schedule": bench_schedule.main, "prefill": bench_prefill.main}
LIVE = ("s1", "s2", "s3", "overhead")


def run_live(names: list[str]) -> None:
    base = load_config()
    engine = base.pools["small"].engine
    config = bench_config(
        base,
        {
            "bench-small": ("small", engine),
            "bench-small-unchunked": (
                "small",
                EngineSpec(**{**engine.model_dump(), "enable_chunked_prefill": False}),
            ),
        },
    )
    stack = start_stack(config)
    url = stack.gateway_url
    try:
        if "s1" in names:
            bench_s1_short_behind_long.run(url, "bench-small", config, engine.to_engine_config())
        if "s3" in names:
            bench_s3_prefill_stutter.run((url, "bench-small"), (url, "bench-small-unchunked"), config)
        if "s2" in names:
            metrics = stack.tritons["bench-small"].metrics_url
            bench_s2_document_full_server.run(url, "bench-small", metrics, config)
        if "overhead" in names:
            bench_serving_overhead.run(
                url, "bench-small", config.model_dir("bench-small"), engine.to_engine_config(), config
            )
    finally:
        stack.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"subset of {[*OFFLINE, *LIVE]} (default: all)")
    args = parser.parse_args(argv)
    names = args.names or [*OFFLINE, *LIVE]
    unknown = set(names) - {*OFFLINE, *LIVE}
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    for name in names:
        if name in OFFLINE:
            OFFLINE[name]([])
    live = [n for n in names if n in LIVE]
    if live:
        run_live(live)
    return 0


if __name__ == "__main__":
    sys.exit(main())
