"""Step timings of the real CPU engine (`LLMEngine.step` on a built model), for fitting the
simulator's cost model to the CPU target: what `bench sim-trust` replays a trace with.

Each sample is one step: the tokens it computed, the positions they attended (context) and its
wall time. Tokens and context are read off the sequences before and after the step, so the
engine runs untouched. The workloads mix prompt reads of several lengths with decode batches
of several sizes and depths, so the fit sees both terms move independently.
"""

from __future__ import annotations

import time
from pathlib import Path

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.request import EngineRequest, SamplingParams
from simulator.cost_model import StepSample

# (prompt tokens, streams, steps timed): reads of one prompt, then decodes at several batches.
WORKLOADS: tuple[tuple[int, int, int], ...] = (
    (64, 1, 4),
    (256, 1, 4),
    (1024, 1, 6),
    (32, 4, 12),
    (32, 16, 12),
    (512, 8, 12),
    (1024, 4, 12),
)


def _time_steps(engine: LLMEngine, steps: int) -> list[StepSample]:
    samples: list[StepSample] = []
    for _ in range(steps):
        seqs = engine.scheduler.unfinished()
        if not seqs:
            break
        before = {id(seq): seq.num_computed_tokens for seq in seqs}
        started = time.perf_counter()
        engine.step()
        seconds = time.perf_counter() - started
        tokens = context = 0
        for seq in seqs:
            done = seq.num_computed_tokens - before[id(seq)]
            if done > 0:
                tokens += done
                context += seq.num_computed_tokens
        if tokens:
            samples.append(StepSample(tokens, context, seconds))
    return samples


def profile_cpu_engine(model_dir: Path, config: EngineConfig, vocab_size: int = 256) -> list[StepSample]:
    """Time steps of the engine over `WORKLOADS` (a few seconds on the `small` model)."""
    engine = LLMEngine.from_pretrained(model_dir, config)
    samples: list[StepSample] = []
    for w, (prompt_tokens, streams, steps) in enumerate(WORKLOADS):
        for s in range(streams):
            prompt = tuple((w * 31 + s * 7 + i) % vocab_size + 1 for i in range(prompt_tokens))
            engine.add_request(
                EngineRequest(f"p{w}-{s}", prompt, SamplingParams(max_tokens=steps + 64, ignore_eos=True))
            )
        samples += _time_steps(engine, steps)
        engine.abort_all()
    return samples
