"""The serving-overhead bench's client: a process of its own, niced, keeping `streams` replies
streaming back to back (each slot asks again as its reply ends) and timestamping every
response that carries tokens.

    parent                                   client process (run_client)
    ──────                                   ───────────────────────────
    start ─────────────────────────────────▶ slots stream (gateway SSE, or Triton gRPC to `llm`)
          ◀───────────── ("ready",) ──────── every slot has had tokens
    CPU snapshot at t0, sleep, snapshot at t1
    control.put((t0, t1)) ─────────────────▶ count what arrived in [t0, t1]; stop the slots
          ◀──── ("report", ClientReport) ────

Both processes read `time.monotonic()`, one clock for the whole machine, so the window the
parent measured CPU over is the one the client counts responses in. The first reply of slot i
asks for (i + 1) / streams of the reply length, so the slots' ends, and the prompts' prefills
after them, are spread out rather than all at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from bench.sse_connection import StreamFailed, generate_request, stream_reply
from bench.sse_streams import CLIENT_NICENESS

ClientPath = Literal["gateway", "triton"]


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """Where the replies go: the gateway's HTTP API (`path` "gateway": `model` is the pool's
    model id, `credential` a team's API key) or a Triton server's gRPC port straight to `llm`
    ("triton": `credential` the inference key; the prompt goes as token ids, as the gateway
    sends it). One slot per prompt."""

    path: ClientPath
    host: str
    port: int
    credential: str
    model: str
    prompts: tuple[str, ...]
    prompt_ids: tuple[tuple[int, ...], ...]
    reply_tokens: int


@dataclass(frozen=True, slots=True)
class ClientReport:
    """What arrived in the window: responses with tokens, their tokens, replies that ended,
    and failed replies by kind over the whole run."""

    responses: int
    tokens: int
    replies: int
    errors: dict[str, int]


@dataclass(slots=True)
class _Tally:
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, tokens)
    ends: list[float] = field(default_factory=list)
    started: set[int] = field(default_factory=set)  # slots that have had tokens
    errors: Counter[str] = field(default_factory=Counter)

    def report(self, since: float, until: float) -> ClientReport:
        inside = [n for t, n in self.arrivals if since <= t <= until]
        replies = sum(since <= t <= until for t in self.ends)
        return ClientReport(len(inside), sum(inside), replies, dict(self.errors))


def _reply_tokens(spec: ClientSpec, slot: int, n: int) -> int:
    return spec.reply_tokens if n else max(1, spec.reply_tokens * (slot + 1) // len(spec.prompts))


async def _sse_slot(spec: ClientSpec, slot: int, tally: _Tally) -> None:
    def on_tokens(count: int) -> None:
        tally.arrivals.append((time.monotonic(), count))
        tally.started.add(slot)

    for n in range(1_000_000):
        body = {"model": spec.model, "prompt": spec.prompts[slot], "ignore_eos": True}
        request = generate_request(
            spec.host, spec.port, spec.credential, {**body, "max_tokens": _reply_tokens(spec, slot, n)}
        )
        try:
            await stream_reply(spec.host, spec.port, request, on_tokens)
        except (StreamFailed, OSError) as exc:
            tally.errors[exc.kind if isinstance(exc, StreamFailed) else type(exc).__name__] += 1
            await asyncio.sleep(0.1)
            continue
        tally.ends.append(time.monotonic())


async def _triton_slot(spec: ClientSpec, slot: int, tally: _Tally, client: Any) -> None:
    from contracts.generation import GenerationRequest
    from contracts.token_ids import PackedTokenIds
    from router.triton_backend import LLM_MODEL, build_inputs

    ids = PackedTokenIds.pack(spec.prompt_ids[slot])
    headers = _triton_headers(spec.credential)
    for n in range(1_000_000):
        request_id = f"overhead-{os.getpid()}-{slot}-{n}"
        generation = GenerationRequest(
            request_id,
            spec.model,
            spec.prompts[slot],
            _reply_tokens(spec, slot, n),
            ignore_eos=True,
            prompt_token_ids=ids,
        )
        request = {"model_name": LLM_MODEL, "inputs": build_inputs(generation), "request_id": request_id}

        async def requests(request: dict[str, Any] = request) -> AsyncIterator[dict[str, Any]]:
            yield request

        try:
            async for result, error in client.stream_infer(requests(), headers=headers):
                if error is not None:
                    raise StreamFailed(f"grpc {str(error).split(':', 1)[0]}")
                count = len(result.as_numpy("output_token_ids"))
                if count:
                    tally.arrivals.append((time.monotonic(), count))
                    tally.started.add(slot)
                if result.as_numpy("finish_reason")[0]:
                    break
        except StreamFailed as failed:
            tally.errors[failed.kind] += 1
            await asyncio.sleep(0.1)
            continue
        tally.ends.append(time.monotonic())


def _triton_headers(key: str) -> dict[str, str]:
    from config.internal_secrets import TRITON_GRPC_KEY_HEADER

    return {TRITON_GRPC_KEY_HEADER: key}


async def _run(spec: ClientSpec, reports: Any, control: Any) -> None:
    tally = _Tally()
    client: Any = None
    if spec.path == "triton":
        import tritonclient.grpc.aio as triton

        client = triton.InferenceServerClient(f"{spec.host}:{spec.port}")
        slots = [asyncio.create_task(_triton_slot(spec, i, tally, client)) for i in range(len(spec.prompts))]
    else:
        slots = [asyncio.create_task(_sse_slot(spec, i, tally)) for i in range(len(spec.prompts))]
    while len(tally.started) < len(spec.prompts) and not all(s.done() for s in slots):
        await asyncio.sleep(0.02)
    reports.put(("ready",))
    since, until = await asyncio.get_running_loop().run_in_executor(None, control.get)
    for slot in slots:
        slot.cancel()
    await asyncio.gather(*slots, return_exceptions=True)
    if client is not None:
        await client.close()
    reports.put(("report", tally.report(since, until)))


def run_client(spec: ClientSpec, reports: Any, control: Any) -> None:
    """The client process (multiprocessing, spawn): see the module docstring for the protocol
    on `reports` and `control` (multiprocessing queues)."""
    os.nice(CLIENT_NICENESS)  # the serving processes come first on the shared cores
    asyncio.run(_run(spec, reports, control))
