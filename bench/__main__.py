"""`make bench` / `python -m bench [NAME ...]`: run the benchmarks, each writing
`bench/results/<name>.json` and printing its table.

The offline ones start what they measure themselves; the live ones run on stacks of their own
(`bench/live_runs.py`). `chaos` and `partitions` hand over to the fault harness (`faults/`),
`gpu` runs S1, S3 and S4 on TensorRT-LLM (`bench/bench_gpu.py`, for `switchyard gpu-check`).
"""

from __future__ import annotations

import argparse
import sys

from bench import (
    bench_concurrency,
    bench_edge,
    bench_gpu,
    bench_guided,
    bench_peers,
    bench_prefill,
    bench_scale,
    bench_schedule,
    bench_serving_overhead,
    bench_short_request,
)
from bench.live_runs import LIVE, run_live

OFFLINE = {
    "schedule": bench_schedule.main,
    "prefill": bench_prefill.main,
    "scale": bench_scale.main,
    "edge": bench_edge.main,  # its own gateway process and Redis, no Triton
    "concurrency": bench_concurrency.main,  # its own two-worker gateway and Redis, no Triton
    "short-request": bench_short_request.main,  # its own one-worker gateway and Redis, no Triton
    "guided": bench_guided.main,  # the engine alone: grammar masks and compiles
    "peers": bench_peers.main,  # its own upstream, the project's gateway, LiteLLM, smg, vllm-router
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The fault harness (faults/): its own flags (--minutes, --seed, ...); never part of "all".
    # Imported only here: its clients use the OpenAI SDK, a dev extra the GPU image (where
    # `python -m bench gpu` runs) does not install.
    if argv[:1] == ["chaos"]:
        from faults import chaos_run

        return chaos_run.main(argv[1:])
    if argv[:1] == ["partitions"]:  # --quick as well
        from faults import partition_run

        return partition_run.main(argv[1:])
    if argv[:1] == ["gpu"]:  # S1, S3, S4 on TensorRT-LLM (`switchyard gpu-check`); never part of "all"
        return bench_gpu.main(argv[1:])
    if argv[:1] == ["guided"] and len(argv) > 1:  # its own flag (--quick)
        return bench_guided.main(argv[1:])
    if argv[:1] == ["serving_overhead"]:  # its own flags (--seconds, --quick, --cap, --label, ...)
        return bench_serving_overhead.main(argv[1:])
    if argv[:1] == ["short-request"] and len(argv) > 1:  # its own flags (--requests N, --quick)
        bench_short_request.main(argv[1:])
        return 0
    if argv[:1] == ["peers"] and len(argv) > 1:  # its own flags (--quick, --only NAME ..., --hold S)
        bench_peers.main(argv[1:])
        return 0
    if argv[:1] == ["concurrency"] and len(argv) > 1:  # its own flags (--quick, --max-streams N, --hold S)
        bench_concurrency.main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names",
        nargs="*",
        help=f"subset of {[*OFFLINE, *LIVE]} (default: all); `chaos [--minutes N --seed S]` and "
        "`partitions [--minutes N --seed S | --quick]` and "
        "`gpu [--engine llmapi|legacy] [--config PATH]` and "
        "`concurrency [--quick | --max-streams N] [--hold S]` and "
        "`short-request [--requests N | --quick]` and "
        "`peers [--quick] [--only NAME ...] [--hold S]` and "
        "`serving_overhead [--seconds S | --quick] [--cap N] [--label L]` alone",
    )
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
