"""The engine alone, in this process: an `EngineLoop` whose streams are read by threads as fast
as it writes them, kept at `streams` replies back to back as the live client keeps them
(bench/overhead_client.py: the same prompts, reply lengths and staggered first replies).

What it gives the serving-overhead bench: the tokens a second the engine makes with nothing
between it and the reader, and what its step thread (`engine-step`, read from /proc) spends
per token, the figure the engine stub's step thread is held against.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.process_stats import cpu_seconds, thread_cpu_seconds
from bench.serving_processes import ENGINE_THREAD
from engine.config import EngineConfig
from engine.engine_loop import EngineLoop
from engine.llm_engine import LLMEngine
from engine.request import EngineRequest, SamplingParams


@dataclass(frozen=True, slots=True)
class EngineAloneResult:
    """The window's figures: outputs that carried tokens (`responses`: the engine's steps as
    each reader saw them, unpaced), tokens, CPU of the step thread and of this whole process."""

    wall_s: float
    responses: int
    tokens: int
    engine_thread_s: float
    process_s: float


def run_engine_alone(
    model_dir: Path,
    engine_config: EngineConfig,
    prompt_ids: list[list[int]],
    reply_tokens: int,
    warmup_s: float,
    seconds: float,
) -> EngineAloneResult:
    """One slot per prompt, `warmup_s` once every slot has tokens, then `seconds` measured."""
    loop = EngineLoop(LLMEngine.from_pretrained(model_dir, engine_config))
    arrivals: list[tuple[float, int]] = []  # (monotonic, tokens); list.append holds the GIL
    started: set[int] = set()
    stop = threading.Event()
    failures: list[BaseException] = []

    def slot(index: int) -> None:
        try:
            for n in range(1_000_000):
                if stop.is_set():
                    return
                tokens = reply_tokens if n else max(1, reply_tokens * (index + 1) // len(prompt_ids))
                request_id = f"alone-{index}-{n}"
                stream = loop.submit(
                    EngineRequest(
                        request_id=request_id,
                        prompt_token_ids=tuple(prompt_ids[index]),
                        sampling=SamplingParams(max_tokens=tokens, ignore_eos=True),
                    )
                )
                while not stop.is_set():
                    out = stream.wait(timeout=60)
                    if out is None:
                        raise RuntimeError("engine stalled")
                    if out.new_token_ids:
                        arrivals.append((time.monotonic(), len(out.new_token_ids)))
                        started.add(index)
                    if out.finished:
                        break
                else:
                    loop.cancel(request_id)
        except BaseException as exc:
            failures.append(exc)

    loop.start()
    threads = [threading.Thread(target=slot, args=(i,), daemon=True) for i in range(len(prompt_ids))]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 120
        while len(started) < len(threads) and not failures and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(warmup_s)
        before = _cpu()
        since = time.monotonic()
        time.sleep(seconds)
        after = _cpu()
        until = time.monotonic()
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        loop.stop(timeout=10)
    if failures:
        raise RuntimeError(f"the in-process engine failed: {failures[0]!r}") from failures[0]
    inside = [n for t, n in arrivals if since <= t <= until]
    return EngineAloneResult(until - since, len(inside), sum(inside), after[0] - before[0], after[1] - before[1])


def _cpu() -> tuple[float, float]:
    """(step thread, whole process) CPU seconds of this process so far."""
    thread = thread_cpu_seconds(os.getpid(), ENGINE_THREAD)
    process = cpu_seconds(os.getpid())
    if thread is None or process is None:
        raise RuntimeError(f"no thread named {ENGINE_THREAD!r} in this process (engine/engine_loop.py names it)")
    return thread, process
