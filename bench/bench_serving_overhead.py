"""Serving overhead (S16): what carrying each streamed response from the engine to the client
costs, process by process, and the tokens a second the stack keeps against the engine alone.

    python -m bench serving_overhead [--seconds S | --quick] [--cap N] [--label L]
        [--streams N] [--reply-tokens N] [--no-direct] [--out PATH]

One server of the `small` model (a stack of its own, pacing its streams as switchyard.yaml's
`small` pool does: `stream_interval_ms`, `max_stream_responses_per_s`, which `--cap` overrides)
holds `--streams` replies (12) of `--reply-tokens` tokens (1,000; 200-token prompts,
`ignore_eos`) back to back: each one asks again as its reply ends. Each variant streams
`--seconds` (30) after a warm-up, and is measured over that window only:

    gateway + triton   SSE through the gateway (two workers) and Triton, read by a client
                       process of its own, niced (bench/overhead_client.py)
    triton direct      gRPC straight to the server's `llm` with the prompt's token ids, as the
                       gateway sends them: what the server costs without the gateway
    engine alone       the same engine in this process, its streams read by threads
                       (bench/engine_alone.py; only when the stack serves on the CPU engine)

CPU per process is utime + stime from /proc before and after the window
(bench/serving_processes.py finds tritonserver, each Python backend stub by its model, the
gateway's workers, Redis and the client). The stack is also measured idle for `idle_s` (10 s)
before the variants and again after them, each process at the lower of its two rates (a
transient in one window, say a worker's first refresh after the start, is not idle work):
what each process spends with nothing streaming (a server host probing its server ten times a
second, a gateway worker's view of the fleet) is per server or per worker, not per response,
so the headline figures are what streaming *added* (`less_idle`); the gross figures, idle work
included, sit beside them (`*_gross`). The engine stub's step thread is named `engine-step`
in the OS, so its CPU (the engine's own work) is read apart from the stub's other threads
(Triton's execute, the sender). The relay is everything between the engine's step and the
client: tritonserver + every stub + the gateway's workers, less the engine step thread;
per response = over the responses with tokens the client counted in the window.

Results go to bench/results/serving_overhead.json under `--label` (bench/labeled_results.py:
a run labelled "after" sits beside "before"). On the shared 2-core development machine the
client and everything else share the cores the stack uses: the load average is recorded.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.engine_alone import EngineAloneResult, run_engine_alone
from bench.labeled_results import write_run
from bench.live import engine_config_of, load_tokenizer, prompt_of, start_stack
from bench.overhead_client import ClientReport, ClientSpec, run_client
from bench.serving_processes import (
    ServingProcess,
    WindowCpu,
    engine_stubs,
    find_serving_processes,
    snapshot,
    window_cpu,
)
from config.settings import SwitchyardConfig, load_config
from report.result_files import RESULTS_DIR, format_table
from stack.local_stack import Stack
from stack.measured_stack import measured_config

NAME = "serving_overhead"
POOL = "bench-small"
PROMPT_TOKENS = 200
TARGET_RELAY_MS = 1.0  # issue 41 (0.6 of issue 30 retired): the relay's CPU per streamed response, summed
READY_TIMEOUT_S = 180.0


@dataclass(frozen=True, slots=True)
class Settings:
    """One run's size; `cap` None keeps the pool's `max_stream_responses_per_s`."""

    seconds: float = 30.0
    warmup_s: float = 3.0
    idle_s: float = 10.0  # the stack measured with nothing streaming, before the variants
    streams: int = 12
    reply_tokens: int = 1000
    cap: int | None = None
    direct: bool = True
    label: str = "latest"
    engine_in_process: bool = True  # False: the engine as the `cpu_engine` model, as before


QUICK = Settings(seconds=5.0, warmup_s=1.0, idle_s=2.0, streams=4, reply_tokens=200)


@dataclass(frozen=True, slots=True)
class Variant:
    """One variant's window: what the client counted and what each process spent."""

    name: str
    report: ClientReport
    cpu: WindowCpu  # gross: idle work included
    added: WindowCpu  # what streaming added: `cpu` less the idle stack's over as long


def overhead_config(base: SwitchyardConfig, cap: int | None, engine_in_process: bool = True) -> SwitchyardConfig:
    """One server of `small` as pool `POOL`, paced as `base`'s `small` pool, `cap` overriding
    its `max_stream_responses_per_s`; the engine inside `llm` or (`engine_in_process` False)
    a model of its own."""
    config = measured_config(base, {POOL: ("small", base.pools["small"].engine)}, {"bench": 1.0})
    update: dict[str, Any] = {"engine_in_process": engine_in_process}
    if cap is not None:
        update["max_stream_responses_per_s"] = cap
    return config.model_copy(update={"pools": {POOL: config.pools[POOL].model_copy(update=update)}})


def _idle(stack: Stack, settings: Settings) -> WindowCpu:
    """The stack's CPU with nothing streaming, over `idle_s`."""
    assert stack.gateway is not None and stack.gateway.pid is not None
    processes = find_serving_processes(os.getpid(), stack.gateway.pid)
    engines = [p.pid for p in engine_stubs(processes)]
    before = snapshot(processes, engines)
    time.sleep(settings.idle_s)
    return window_cpu(processes, before, snapshot(processes, engines))


def _live(stack: Stack, name: str, spec: ClientSpec, settings: Settings) -> tuple[str, ClientReport, WindowCpu]:
    """Run the client, wait until every slot streams and the warm-up, measure `seconds`."""
    assert stack.gateway is not None and stack.gateway.pid is not None
    processes = find_serving_processes(os.getpid(), stack.gateway.pid, via_gateway=spec.path == "gateway")
    engines = [p.pid for p in engine_stubs(processes)]
    ctx = multiprocessing.get_context("spawn")
    reports, control = ctx.Queue(), ctx.Queue()
    client = ctx.Process(target=run_client, args=(spec, reports, control), daemon=True)
    client.start()
    try:
        try:
            reports.get(timeout=READY_TIMEOUT_S)
        except queue.Empty:
            raise RuntimeError(f"{name}: the client's streams did not all start in {READY_TIMEOUT_S:.0f} s") from None
        time.sleep(settings.warmup_s)
        assert client.pid is not None
        measured = [*processes, ServingProcess("client", client.pid, relay=False)]
        before = snapshot(measured, engines)
        time.sleep(settings.seconds)
        after = snapshot(measured, engines)
        control.put((before.at, after.at))
        _, report = reports.get(timeout=60)
    finally:
        client.join(timeout=15)
        if client.is_alive():
            client.kill()
    return name, report, window_cpu(measured, before, after)


def measure(settings: Settings, base: SwitchyardConfig | None = None) -> dict[str, Any]:
    """Every variant on one stack (then the engine alone beside the idle stack); the run."""
    base = load_config() if base is None else base
    config = overhead_config(base, settings.cap, settings.engine_in_process)
    tokenizer = load_tokenizer(config, POOL)
    prompts = tuple(prompt_of(tokenizer, PROMPT_TOKENS, seed=900 + i) for i in range(settings.streams))
    prompt_ids = tuple(tuple(tokenizer.encode(p).ids) for p in prompts)
    load_before = os.getloadavg()
    stack, teams = start_stack(config)
    windows: list[tuple[str, ClientReport, WindowCpu]] = []
    alone: EngineAloneResult | None = None
    try:
        idle_before = _idle(stack, settings)
        api_key = teams["bench"]["Authorization"].removeprefix("Bearer ")
        host, port = config.gateway.host, stack.gateway_port
        gateway = ClientSpec("gateway", host, port, api_key, POOL, prompts, prompt_ids, settings.reply_tokens)
        windows.append(_live(stack, "gateway + triton", gateway, settings))
        if settings.direct:
            key = config.triton_inference_key()
            grpc_port = config.pools[POOL].ports.grpc
            direct = ClientSpec("triton", "127.0.0.1", grpc_port, key, POOL, prompts, prompt_ids, settings.reply_tokens)
            windows.append(_live(stack, "triton direct", direct, settings))
        idle = idle_before.quieter(_idle(stack, settings))
        if config.serving.target == "cpu":  # elsewhere the stack's engine is not the one here
            alone = run_engine_alone(
                config.model_dir(POOL),
                engine_config_of(config.pools[POOL].engine),
                [list(ids) for ids in prompt_ids],
                settings.reply_tokens,
                settings.warmup_s,
                settings.seconds,
            )
    finally:
        stack.stop()
    variants = [Variant(name, report, cpu, cpu.less_idle(idle)) for name, report, cpu in windows]
    pool = config.pools[POOL]
    meta = {
        "label": settings.label,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "seconds": settings.seconds,
        "warmup_s": settings.warmup_s,
        "idle_s": settings.idle_s,
        "streams": settings.streams,
        "prompt_tokens": PROMPT_TOKENS,
        "reply_tokens": settings.reply_tokens,
        "stream_interval_ms": pool.stream_interval_ms,
        "max_stream_responses_per_s": pool.max_stream_responses_per_s,
        "engine_in_process": pool.engine_in_process,
        "cores": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        **_headlines(variants, alone),
        "target_relay_ms_per_response": TARGET_RELAY_MS,
    }
    return {"meta": meta, "variants": _variant_rows(variants, alone), "processes": _process_rows(variants, alone)}


def _per(value: float, count: int, scale: float) -> float | None:
    return round(scale * value / count, 3) if count else None


def _tokens_per_s(tokens: int, wall_s: float) -> float:
    return tokens / wall_s if wall_s > 0 else 0.0


def _relay_figures(live: Variant, direct: Variant | None, suffix: str) -> dict[str, Any]:
    """The relay's CPU per response, summed, the gateway's and the server's shares; `suffix`
    "" for what streaming added, "_gross" with the idle stack's work."""
    cpu = live.added if suffix == "" else live.cpu
    responses = live.report.responses
    figures: dict[str, Any] = {}
    relay = cpu.relay_s
    figures[f"relay_ms_per_response{suffix}"] = None if relay is None else _per(relay, responses, 1e3)
    gateway = sum(s for role, s in cpu.by_role.items() if role.startswith("gateway worker"))
    figures[f"gateway_ms_per_response{suffix}"] = _per(gateway, responses, 1e3)
    if relay is not None:  # the server's share of the same relay: tritonserver and its stubs
        figures[f"server_relay_ms_per_response{suffix}"] = _per(relay - gateway, responses, 1e3)
    if direct is not None:
        direct_relay = (direct.added if suffix == "" else direct.cpu).relay_s
        if direct_relay is not None:
            figures[f"server_relay_ms_per_response_direct{suffix}"] = _per(direct_relay, direct.report.responses, 1e3)
    return figures


def _headlines(variants: list[Variant], alone: EngineAloneResult | None) -> dict[str, Any]:
    by_name = {v.name: v for v in variants}
    live = by_name["gateway + triton"]
    direct = by_name.get("triton direct")
    figures = {**_relay_figures(live, direct, ""), **_relay_figures(live, direct, "_gross")}
    live_rate = _tokens_per_s(live.report.tokens, live.cpu.wall_s)
    if alone is not None and alone.tokens:
        alone_rate = _tokens_per_s(alone.tokens, alone.wall_s)
        figures["tokens_per_s_ratio"] = round(live_rate / alone_rate, 3)
        if direct is not None:
            figures["tokens_per_s_ratio_direct"] = round(
                _tokens_per_s(direct.report.tokens, direct.cpu.wall_s) / alone_rate, 3
            )
    return figures


def _variant_rows(variants: list[Variant], alone: EngineAloneResult | None) -> list[dict[str, Any]]:
    alone_rate = _tokens_per_s(alone.tokens, alone.wall_s) if alone is not None else None
    rows = []
    for v in variants:
        rate = _tokens_per_s(v.report.tokens, v.cpu.wall_s)
        relay = v.added.relay_s
        rows.append(
            {
                "variant": v.name,
                "wall_s": round(v.cpu.wall_s, 2),
                "responses": v.report.responses,
                "tokens": v.report.tokens,
                "replies": v.report.replies,
                "tokens_per_s": round(rate),
                "vs_engine_alone": round(rate / alone_rate, 3) if alone_rate else None,
                "tokens_per_response": _per(v.report.tokens, v.report.responses, 1.0),
                "relay_ms_per_response": None if relay is None else _per(relay, v.report.responses, 1e3),
                "relay_us_per_token": None if relay is None else _per(relay, v.report.tokens, 1e6),
                "engine_us_per_token": None
                if v.cpu.engine_thread_s is None
                else _per(v.cpu.engine_thread_s, v.report.tokens, 1e6),
                "errors": sum(v.report.errors.values()),
                "error_kinds": v.report.errors or None,
            }
        )
    if alone is not None:
        rows.append(
            {
                "variant": "engine alone",
                "wall_s": round(alone.wall_s, 2),
                "responses": alone.responses,
                "tokens": alone.tokens,
                "tokens_per_s": round(_tokens_per_s(alone.tokens, alone.wall_s)),
                "vs_engine_alone": 1.0,
                "tokens_per_response": _per(alone.tokens, alone.responses, 1.0),
                "engine_us_per_token": _per(alone.engine_thread_s, alone.tokens, 1e6),
                "errors": 0,
            }
        )
    return rows


def _process_row(
    variant: str,
    process: str,
    cpu_s: float,
    added_s: float | None,
    wall_s: float,
    responses: int,
    tokens: int,
) -> dict[str, Any]:
    """One process's window: gross CPU, its share of a core, and per response and per token
    what streaming added (`added_s`; None: no idle measure, the gross)."""
    added = cpu_s if added_s is None else added_s
    return {
        "variant": variant,
        "process": process,
        "cpu_s": round(cpu_s, 3),
        "core_pct": round(100 * cpu_s / wall_s, 1) if wall_s > 0 else None,
        "idle_core_pct": None if added_s is None or wall_s <= 0 else round(100 * (cpu_s - added_s) / wall_s, 1),
        "ms_per_response": _per(added, responses, 1e3),
        "us_per_token": _per(added, tokens, 1e6),
    }


def _process_rows(variants: list[Variant], alone: EngineAloneResult | None) -> list[dict[str, Any]]:
    rows = []
    for v in variants:
        counts = (v.cpu.wall_s, v.report.responses, v.report.tokens)
        for role, cpu_s in v.cpu.by_role.items():
            rows.append(_process_row(v.name, role, cpu_s, v.added.by_role.get(role), *counts))
        if v.cpu.engine_thread_s is not None:
            engine, added = v.cpu.engine_thread_s, v.added.engine_thread_s
            rows.append(_process_row(v.name, "  of which engine-step thread", engine, added, *counts))
        if v.cpu.relay_s is not None:
            rows.append(_process_row(v.name, "relay (sum)", v.cpu.relay_s, v.added.relay_s, *counts))
    if alone is not None:
        counts = (alone.wall_s, alone.responses, alone.tokens)
        rows.append(_process_row("engine alone", "bench process (engine + readers)", alone.process_s, None, *counts))
        rows.append(_process_row("engine alone", "  of which engine-step thread", alone.engine_thread_s, None, *counts))
    return rows


def report(run: dict[str, Any]) -> str:
    """The run as text: its headline figures, the variants, the processes."""
    meta = "\n".join(f"  {key}: {value}" for key, value in run["meta"].items())
    return f"{meta}\n\n{format_table(run['variants'])}\n\n{format_table(run['processes'])}"


def run_default(base: SwitchyardConfig) -> dict[str, Any]:
    """`python -m bench overhead` (and `make bench`): the full size, stored as "latest"."""
    settings = Settings()
    run = measure(settings, base)
    path = write_run(RESULTS_DIR / f"{NAME}.json", NAME, settings.label, run)
    print(f"== {NAME} ({settings.label}) ==\n{report(run)}\n-> {path}")
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench serving_overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, help="streaming measured per variant (default 30)")
    parser.add_argument("--quick", action="store_true", help="a small run (~5 s a variant, 4 streams) for tests")
    parser.add_argument("--cap", type=int, help="max_stream_responses_per_s for this run (default: the pool's)")
    parser.add_argument("--label", default="latest", help="the run's name in the results file (before, after, ...)")
    parser.add_argument("--streams", type=int, help="replies streaming at once (default 12)")
    parser.add_argument("--reply-tokens", type=int, help="tokens per reply (default 1000)")
    parser.add_argument("--no-direct", action="store_true", help="skip the gRPC-straight-to-Triton variant")
    parser.add_argument(
        "--engine-model", action="store_true", help="the engine as a model of its own (cpu_engine), not inside llm"
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / f"{NAME}.json", help="the results file")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    for flag, value in (("--seconds", args.seconds), ("--cap", args.cap), ("--streams", args.streams)):
        if value is not None and value <= 0:
            parser.error(f"{flag} must be positive")
    if args.reply_tokens is not None and args.reply_tokens <= 0:
        parser.error("--reply-tokens must be positive")
    settings = replace(
        settings,
        seconds=args.seconds or settings.seconds,
        cap=args.cap,
        streams=args.streams or settings.streams,
        reply_tokens=args.reply_tokens or settings.reply_tokens,
        direct=not args.no_direct,
        label=args.label,
        engine_in_process=not args.engine_model,
    )
    run = measure(settings)
    path = write_run(args.out, NAME, settings.label, run)
    print(f"== {NAME} ({settings.label}) ==\n{report(run)}\n-> {path}")
    return 0
