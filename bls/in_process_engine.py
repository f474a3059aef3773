"""The engine inside `llm`'s own process: outputs handed to the pipeline in memory.

Over BLS every streamed response crosses two Python processes and Triton between them: the
engine stub packs it as tensors into shared memory, Triton hands it to `llm`'s stub, whose
worker thread wakes on it and whose loop parses it back. Measured on two cores
(`bench serving_overhead`): over a millisecond of CPU per response before `llm` had even
looked at it. When the engine is a Python loop (the CPU reference engine), `llm` can host it
instead:

    llm stub:  pipeline ──submit()──▶ EngineHost ──▶ EngineLoop (its own thread)
                  ▲                     │ sender thread, paced as every server's replies
                  └─ asyncio queues ◀───┘ deliver(): one wake of the loop per sender pass,
                                               for all the pass's outputs (bls/loop_handoff.py)

The pacing, the metrics and heartbeat, the cancels and the early-cancel memory are the same
`EngineHost` the `cpu_engine` model runs; only the hop between the processes is gone, and
with it the engine model (the pool's repository has no `cpu_engine` then: build_engines/
repository.py). A GPU engine behind TensorRT-LLM's C++ backend keeps the BLS path.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from bls.engine_host import EngineHost
from bls.loop_handoff import LoopHandoff
from bls.tensors import InputError
from engine.request import EngineRequest, RequestOutput


class _QueueSink:
    """Hands one request's outputs from the engine host's sender thread to the event loop,
    through the loop's handoff that every reply of this engine shares."""

    def __init__(self, handoff: LoopHandoff[RequestOutput]) -> None:
        self._handoff = handoff
        self.outputs: asyncio.Queue[RequestOutput] = asyncio.Queue()

    def deliver(self, output: RequestOutput) -> None:
        self._handoff.put(self.outputs, output)

    def is_cancelled(self) -> bool:
        return False  # `llm` polls its own client and cancels through `cancel()`


class InProcessEngine:
    """`generate` and `cancel` for `TritonStages` over an engine host in this process."""

    def __init__(self, host: EngineHost, name: str = "cpu_engine") -> None:
        """`name`: the engine's, at the head of its refusals, as the engine model's read."""
        self._host = host
        self._name = name
        self._handoff: LoopHandoff[RequestOutput] | None = None  # of the loop replies run on

    def _handoff_for(self, loop: asyncio.AbstractEventLoop) -> LoopHandoff[RequestOutput]:
        """The handoff every reply on `loop` shares (Triton's stub runs one loop)."""
        if self._handoff is None or self._handoff.loop is not loop:
            self._handoff = LoopHandoff(loop)
        return self._handoff

    async def generate(self, request: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        """The engine's outputs for `request`, the last with `finished`; InputError when the
        engine refuses it (the caller's to fix, as the engine model's refusals). Closed early, it
        cancels the request and waits for the engine's last output, as over BLS: the engine's
        work is counted and its KV freed before the reply is."""
        sink = _QueueSink(self._handoff_for(asyncio.get_running_loop()))
        try:
            self._host.submit(request, sink)
        except ValueError as exc:  # InputError too: the engine cannot serve this request
            raise InputError(f"{self._name}: {exc}") from None
        finished = False
        try:
            while not finished:
                output = await sink.outputs.get()
                finished = output.finished
                yield output
        finally:
            if not finished:
                self._host.cancel(request.request_id)
                while not (await sink.outputs.get()).finished:
                    pass

    async def cancel(self, request_id: str) -> None:
        self._host.cancel(request_id)
