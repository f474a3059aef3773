"""How long one `Scheduler.schedule()` takes with many running decodes.

The scheduler runs on the engine's step thread between forward passes, so its time adds to
every step of every stream. Target: <= 0.5 ms median with 256 running decodes.

Each iteration plans a step, then (untimed) marks it computed and appends a token, so block
boundaries, registrations and appends happen as they would in a real engine.

    python -m bench.bench_schedule [--iterations N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from engine.config import EngineConfig
from engine.request import EngineRequest, RequestClass, SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence
from report.result_files import write_result

NAME = "schedule"
TARGET_MS = 0.5
PROMPT_TOKENS = 32  # short, so 256 replies plus the timed steps fit the default 80k-token cache


def build_decoding_scheduler(num_running: int, config: EngineConfig) -> Scheduler:
    """A scheduler whose `num_running` sequences have read their prompts and are decoding."""
    scheduler = Scheduler(config)
    for i in range(num_running):
        request = EngineRequest(
            request_id=f"r{i}",
            prompt_token_ids=tuple((i * 7 + j) % 32_000 for j in range(PROMPT_TOKENS)),
            sampling=SamplingParams(max_tokens=10_000, ignore_eos=True),
            request_class=RequestClass.INTERACTIVE if i % 4 else RequestClass.BULK,
        )
        scheduler.add(Sequence.from_request(request, arrival=i))
    while any(seq.num_computed_tokens < seq.num_tokens - 1 for seq in scheduler.unfinished()):
        advance(scheduler, scheduler.schedule())
    return scheduler


def advance(scheduler: Scheduler, plan: Any) -> None:
    """What the engine does after the model ran: mark computed, append the sampled token."""
    scheduler.update_after_step(plan)
    for seq, _ in plan.scheduled:
        if seq.num_computed_tokens == seq.num_tokens:
            seq.append_token(seq.all_token_ids[-1] % 32_000 + 1)


def time_schedule(num_running: int, iterations: int) -> dict[str, Any]:
    config = EngineConfig()  # the defaults: 80,000 KV tokens, 256 seats, 512-token budget
    scheduler = build_decoding_scheduler(num_running, config)
    samples_ms = []
    for _ in range(iterations):
        started = time.perf_counter()
        plan = scheduler.schedule()
        samples_ms.append((time.perf_counter() - started) * 1e3)
        assert len(plan.scheduled) == num_running and not plan.preempted_ids
        advance(scheduler, plan)
    samples_ms.sort()
    median = statistics.median(samples_ms)
    return {
        "running_decodes": num_running,
        "iterations": iterations,
        "median_ms": median,
        "p90_ms": samples_ms[int(0.9 * (len(samples_ms) - 1))],
        "us_per_seq": median * 1e3 / num_running,
        "meets_target": median <= TARGET_MS if num_running == 256 else None,
    }


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark. `argv` defaults to none, so `python -m bench` can call `main()`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args(argv or [])
    rows = [time_schedule(n, args.iterations) for n in (16, 64, 256)]
    write_result(
        NAME,
        rows,
        {
            "what": "Scheduler.schedule() wall time per call, running decodes only",
            "target_ms_at_256": TARGET_MS,
            "prompt_tokens": PROMPT_TOKENS,
        },
    )


if __name__ == "__main__":
    main(sys.argv[1:])
