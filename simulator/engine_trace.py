"""Record a trace on the real engine in simulated time: what `trace_replay.replay` must match.

The simulator (`SimServer`) runs the engine's `Scheduler` and `BlockManager` without a model and
charges each step `cost.step_s(prefill, decode, context)`. Here the whole `LLMEngine` runs (a
real model computes every chunk and samples every token), and a virtual clock advances by the
same cost model's seconds for the chunks the engine actually handed the model. With one clock
and one cost model on both sides, any difference in the token times is a difference in what
was scheduled: the comparison does not depend on how fast the host is.

    arrivals ≤ clock ─▶ add_request ─▶ engine.step() ─▶ model.forward(chunks) ─▶ cost.step_s
                                              │                                       │
              token times per request ◀── outputs at clock ◀──── clock += step seconds ┘

It follows the simulator's conventions where the two must agree on something the engine does
not decide: a step that plans nothing (but ran while work was queued) is charged
`cost.step_s(0, 0, 0)`, and an idle engine starts a step on the one arrival that wakes it
(arrivals at the same instant join from the next step on, as events queued behind it do).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.config import EngineConfig
from engine.forward_batch import Model, SequenceChunk
from engine.llm_engine import LLMEngine
from engine.request import EngineRequest, SamplingParams
from simulator.cost_model import StepCostModel
from simulator.trace_replay import ReplayResult, TraceRequest


class CostedModel:
    """A `Model` that prices every forward pass with a `StepCostModel` and then runs it.

    Tokens are counted as `SimServer.begin_step` counts them: a one-token chunk that reaches
    the end of its sequence (it needs logits) is a decode, anything else is read (prefill or
    recompute); context is every position the step's tokens attend to."""

    def __init__(self, model: Model, cost: StepCostModel) -> None:
        self.model = model
        self.cost = cost
        self.last_step_s = 0.0
        self.forward_calls = 0

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def eos_token_id(self) -> int | None:
        return self.model.eos_token_id

    def forward(self, chunks: list[SequenceChunk]) -> npt.NDArray[np.float32]:
        prefill = decode = context = 0
        for chunk in chunks:
            num_tokens = len(chunk.token_ids)
            context += chunk.start_position + num_tokens
            if num_tokens == 1 and chunk.need_logits:
                decode += 1
            else:
                prefill += num_tokens
        self.last_step_s = self.cost.step_s(prefill, decode, context)
        self.forward_calls += 1
        return self.model.forward(chunks)


@dataclass(frozen=True, slots=True)
class EngineTrace:
    """What the engine did with a trace: per request TTFT and gaps (as `replay` reports them),
    how many steps it took and how many sequences it preempted on the way."""

    result: ReplayResult
    steps: int
    num_preemptions: int


def trace_prompt(index: int, length: int, vocab_size: int) -> tuple[int, ...]:
    """A prompt of `length` token ids, distinct per request (none shares a prefix block with
    another, so the prefix cache finds nothing, as with real prompts)."""
    rng = np.random.default_rng([index, length])
    return tuple(int(t) for t in rng.integers(0, vocab_size, length))


def record_engine_trace(
    trace: Sequence[TraceRequest],
    config: EngineConfig,
    model: Model,
    cost: StepCostModel,
    max_model_len: int | None = None,
) -> EngineTrace:
    """Run the trace through an `LLMEngine` over `model` (its KV sized for `config`) on a
    virtual clock; replies are exactly `reply_tokens` long (ignore_eos).

    Prefix caching must be off: the simulator's prompts are all token 0 and share every block,
    real prompts share none, so the two would legitimately read different amounts."""
    if config.enable_prefix_caching:
        raise ValueError(
            "record with enable_prefix_caching=False: simulated prompts share every prefix, real ones none"
        )
    costed = CostedModel(model, cost)
    engine = LLMEngine(config, costed, max_model_len=max_model_len)
    pending = deque(sorted(range(len(trace)), key=lambda i: trace[i].arrival_s))  # stable: ties keep trace order
    first_token: dict[int, float] = {}
    last_token: dict[int, float] = {}
    gaps: list[list[float]] = [[] for _ in trace]
    clock = -math.inf  # before the first arrival: the engine starts idle
    steps = 0

    def add(index: int) -> None:
        request = trace[index]
        engine.add_request(
            EngineRequest(
                request_id=str(index),
                prompt_token_ids=trace_prompt(index, request.prompt_tokens, costed.vocab_size),
                sampling=SamplingParams(max_tokens=request.reply_tokens, ignore_eos=True),
            )
        )

    while pending or engine.has_unfinished():
        while pending and trace[pending[0]].arrival_s <= clock:  # arrived during the last step
            add(pending.popleft())
        if not engine.has_unfinished():  # idle: the next arrival wakes the engine alone
            index = pending.popleft()
            clock = trace[index].arrival_s
            add(index)
        calls = costed.forward_calls
        outputs = engine.step()
        clock += costed.last_step_s if costed.forward_calls > calls else cost.step_s(0, 0, 0)
        steps += 1
        for output in outputs:
            index = int(output.request_id)
            for _ in output.new_token_ids:
                if index in last_token:
                    gaps[index].append(clock - last_token[index])
                else:
                    first_token[index] = clock
                last_token[index] = clock
    result = ReplayResult()
    for index, request in enumerate(trace):
        assert index in first_token, f"request {index} never produced a token"
        result.ttft_s.append(first_token[index] - request.arrival_s)
        result.gaps_s.append(gaps[index])
    return EngineTrace(result, steps, engine.scheduler.num_preemptions)
