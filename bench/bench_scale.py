"""S10: what the control plane costs at 4, 40 and 400 servers, and what one request costs.

    python -m bench scale        (writes bench/results/scale.json; docs/capacity.md reads it)

Idle, per fleet size N: a stand-in fleet (one process) registers N servers and writes their
load reports every `fleet.load_publish_s`, as N servers' own publishers would
(server_host/load_publisher.py; one such publisher's own cost is measured apart, against a
stand-in metrics endpoint); the real directory and picker of a gateway worker
(router/server_directory.py, router/server_picker.py) run in a process of their own, and that
process's CPU time over a quiet window is the worker's idle cost. Then, in the same worker,
picks for requests with prompt prefixes: how long each decision takes, and how old the chosen
server's load report was when routing used it (staleness).

Request path: the gateway app (real auth, admission, idempotency and metering on real Redis)
in-process, with a backend that emits deltas without computing them: CPU per request and per
streamed event (the in-process HTTP client's share included: an upper bound), Redis commands
per request at 10, 300 and 2,000 tokens (sent by the gateway, and run by Redis including the
commands inside scripts), and Redis memory kept per finished request, with a caller-made
request_id and without.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import redis

from bench.redis_commands import ClientCommands
from config.redis_client import redis_client, sync_redis_client
from config.settings import SwitchyardConfig, dump_config, load_config
from contracts.engine_metrics import EngineHealth
from contracts.generation import GenerationDelta, GenerationRequest, PoolReadiness
from fleet_state.load_board import LoadBoard, LoadReport, board_key
from fleet_state.registry import ServerInfo, ServerRegistry, server_key
from fleet_state.server_state import ServerState
from report.result_files import write_result
from router.server_directory import ROUTING_WINDOW_S, ServerDirectory
from router.server_picker import ServerPicker
from server_host.load_publisher import LoadPublisher
from server_host.ports import free_ports
from stack.redis_server import RedisServer

NAME = "scale"
SIZES = (4, 40, 400)
POOL = "small"
IDLE_WINDOW_S = 10.0
PICKS = 2000
REPLY_TOKENS = (10, 300, 2000)
REQUESTS_PER_LENGTH = 20


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        (port,) = free_ports(1)
        server = RedisServer(port, Path(tmp) / "redis", Path(tmp) / "redis.log", secrets_dir=Path(tmp) / "secrets")
        server.start()
        try:
            config = _config(server.url, Path(tmp), server.secrets_dir)
            path = dump_config(config, Path(tmp) / "switchyard.yaml")
            rows = [_real_row(), *(_fleet_row(path, size) for size in SIZES)]
            rows.append(_publisher_row(config))
            rows += asyncio.run(_request_rows(config))
        finally:
            server.stop()
    meta = {
        "idle_window_s": IDLE_WINDOW_S,
        "load_publish_s": config.fleet.load_publish_s,
        "picks": PICKS,
        "targets": {
            "idle_cpu_per_gateway_worker_pct": 2.0,
            "routing_p99_ms_at_400": 0.5,
            "staleness_p99_ms": 250,
        },
    }
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}


def main(argv: list[str] | None = None) -> None:
    run()


def _config(redis_url: str, var: Path, secrets_dir: Path) -> SwitchyardConfig:
    """switchyard.yaml's, with one pool (the one the stand-ins serve) and this run's Redis."""
    base = load_config()
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    return base.model_copy(
        update={
            "models": {POOL: base.models[POOL]},
            "pools": {POOL: base.pools[POOL]},
            "redis": base.redis.model_copy(update={"port": port}),
            "var_dir": str(var / "var"),
            "secrets_dir": str(secrets_dir),
        }
    )


# -- idle and routing, per fleet size -------------------------------------------------------


def _real_row() -> dict[str, Any]:
    """`switchyard up`'s stack with four real tritonservers of the small model and nothing to
    do: the CPU its gateway workers and its supervisor spend over IDLE_WINDOW_S."""
    from bench.live import start_stack
    from stack.measured_stack import measured_config, with_copies

    base = load_config()
    config = with_copies(measured_config(base, {POOL: ("small", base.pools[POOL].engine)}, {"bench": 1.0}), POOL, 4)
    stack, _ = start_stack(config)
    try:
        assert stack.gateway is not None and stack.gateway.pid is not None
        workers = _children(stack.gateway.pid)
        supervisor = _ThreadCpu("supervisor")
        time.sleep(ROUTING_WINDOW_S + 0.5)
        before = ({pid: _process_cpu_s(pid) for pid in workers}, supervisor.read(), time.monotonic())
        time.sleep(IDLE_WINDOW_S)
        wall = time.monotonic() - before[2]
        per_worker = [100 * (_process_cpu_s(pid) - cpu) / wall for pid, cpu in before[0].items()]
        supervisor_pct = 100 * (supervisor.read() - before[1]) / wall
    finally:
        stack.stop()
    return {
        "case": "4 real servers (make up's stack)",
        "gateway_worker_idle_cpu_pct": round(max(per_worker), 2),
        "supervisor_idle_cpu_pct": round(supervisor_pct, 2),
    }


def _children(pid: int) -> list[int]:
    """The uvicorn workers under the gateway's process (or the process itself, alone)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children] or [pid]


def _process_cpu_s(pid: int) -> float:
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fleet_row(config_path: Path, size: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    stop, busy, quiet = ctx.Event(), ctx.Event(), ctx.Event()
    fleet = ctx.Process(target=_stand_in_fleet, args=(str(config_path), size, stop, busy, quiet), daemon=True)
    fleet.start()
    try:
        results: Any = ctx.Queue()
        worker = ctx.Process(target=_gateway_worker, args=(str(config_path), size, busy, quiet, results), daemon=True)
        worker.start()
        row: dict[str, Any] = results.get(timeout=300)
        worker.join(timeout=30)
    finally:
        stop.set()
        fleet.join(timeout=30)
    return {"case": f"{size} servers", **row}


def _stand_in_fleet(config_path: str, size: int, stop: Any, busy: Any, quiet: Any) -> None:
    """N registered servers whose reports are written each period (one pipeline for all: the
    writes N publishers would make), heartbeats every 0.5 s: an idle fleet's (the same load,
    seq and times advancing) until `busy` is set, then loads that move as a busy fleet's; it
    writes nothing while `quiet` is set (routing is then timed alone)."""

    async def main() -> None:
        config = load_config(Path(config_path))
        client = redis_client(config, "admin")
        registry = ServerRegistry(client, config.fleet.dead_after_s)
        servers = [f"{POOL}-{i}" for i in range(size)]
        now = time.time()
        for i, server_id in enumerate(servers):
            info = ServerInfo(server_id, POOL, "127.0.0.1", 20000 + 3 * i, 20001 + 3 * i, 20002 + 3 * i, (),
                              ServerState.READY, now, now)  # fmt: skip
            await registry.register(info)
        rng = random.Random(size)
        seq, period = 0, config.fleet.load_publish_s
        while not stop.is_set():
            if quiet.is_set():
                await asyncio.sleep(period)
                continue
            began, seq = time.time(), seq + 1
            async with client.pipeline(transaction=False) as pipe:
                for server_id in servers:
                    health = EngineHealth(began, 80_000, 80_000, 0, 0, 0, 0)
                    if busy.is_set():
                        free, active, waiting = rng.randrange(0, 80_000, 16), rng.randrange(40), rng.randrange(4)
                        health = EngineHealth(began, 80_000, free, active, waiting, 0, rng.randrange(30))
                    pipe.hset(board_key(POOL), server_id, LoadReport(server_id, seq, began, True, health).encode())
                    if seq % 5 == 0:
                        pipe.hset(server_key(server_id), "heartbeat_at", repr(began))
                await pipe.execute()
            await asyncio.sleep(max(0.0, period - (time.time() - began)))
        await client.delete(board_key(POOL))
        for server_id in servers:
            await registry.deregister(server_id)
        await client.aclose()

    asyncio.run(main())


def _gateway_worker(config_path: str, size: int, busy: Any, quiet: Any, results: Any) -> None:
    """One gateway worker's view of the fleet: its CPU while the fleet idles, then while the
    fleet's loads move (every report differs each period), then routing decisions."""

    async def main() -> dict[str, Any]:
        config = load_config(Path(config_path))
        client = redis_client(config, "admin", socket_timeout=2.0)
        http = httpx.AsyncClient()
        directory = ServerDirectory(
            config, ServerRegistry(client, config.fleet.dead_after_s), LoadBoard(client), http,
            lambda info: None, lambda server_id: None, host=config.network.servers.advertised,
        )  # fmt: skip
        picker = ServerPicker(config, directory)
        directory.start()
        deadline = time.monotonic() + 60
        while sum(load.state is ServerState.READY for load in directory.loads(POOL)) < size:
            assert time.monotonic() < deadline, f"the directory never saw {size} ready servers"
            await asyncio.sleep(0.05)
        await asyncio.sleep(ROUTING_WINDOW_S + 0.5)  # the wait above routed nothing, but asked
        idle_pct = await _cpu_pct_over(IDLE_WINDOW_S)
        busy.set()
        await asyncio.sleep(1.0)
        busy_view_pct = await _cpu_pct_over(IDLE_WINDOW_S)
        cpu, wall = time.process_time(), time.monotonic()
        decisions, staleness = await _picks(directory, picker)
        routing_pct = 100 * (time.process_time() - cpu) / (time.monotonic() - wall)
        # The decision alone: the fleet stand-in quiet and this worker's refreshes stopped, so
        # the same 2-core machine's other processes do not preempt the picks being timed.
        quiet.set()
        await directory.close()
        alone, _ = await _picks(directory, picker, refreshing=False)
        await http.aclose()
        await client.aclose()
        return {
            "gateway_worker_idle_cpu_pct": round(idle_pct, 2),
            "gateway_worker_cpu_pct_fleet_busy_worker_idle": round(busy_view_pct, 2),
            "gateway_worker_cpu_pct_routing": round(routing_pct, 2),
            "routing_p50_ms": round(_quantile(decisions, 0.5) * 1e3, 4),
            "routing_p99_ms": round(_quantile(decisions, 0.99) * 1e3, 4),
            "routing_alone_p50_ms": round(_quantile(alone, 0.5) * 1e3, 4),
            "routing_alone_p99_ms": round(_quantile(alone, 0.99) * 1e3, 4),
            "staleness_p50_ms": round(_quantile(staleness, 0.5) * 1e3, 1),
            "staleness_p99_ms": round(_quantile(staleness, 0.99) * 1e3, 1),
        }

    results.put(asyncio.run(main()))


async def _cpu_pct_over(window_s: float) -> float:
    """This process's CPU over `window_s` of its event loop running on its own, in % of a core."""
    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.sleep(window_s)
    return 100 * (time.process_time() - cpu) / (time.monotonic() - wall)


async def _picks(
    directory: ServerDirectory, picker: ServerPicker, *, refreshing: bool = True
) -> tuple[list[float], list[float]]:
    """PICKS decisions spread over a few seconds (so they sample every refresh phase), with
    ~100 requests of this worker in flight and prompts sharing a few hot prefixes. They are
    timed once this worker routes (its directory reads the board every period then; the first
    request after ROUTING_WINDOW_S without any sees a view up to `idle_refresh_s` old)."""
    if refreshing:
        directory.loads(POOL)
        await asyncio.sleep(2 * directory.refresh_s)
    rng = random.Random(7)
    decisions: list[float] = []
    staleness: list[float] = []
    in_flight: list[tuple[str, GenerationRequest]] = []
    for i in range(PICKS):
        prefix = (rng.randrange(20), *(rng.getrandbits(62) for _ in range(rng.randrange(0, 8))))
        request = GenerationRequest(f"r{i}", POOL, "p", max_tokens=300, prompt_tokens=2000, prefix_block_hashes=prefix)
        began = time.perf_counter()
        server_id = picker.pick(request, ())
        decisions.append(time.perf_counter() - began)
        assert server_id is not None
        staleness.append(time.time() - directory.scraped_at[server_id])
        picker.started(server_id, request)
        in_flight.append((server_id, request))
        if len(in_flight) > 100:
            done_server, done = in_flight.pop(0)
            picker.ended(done_server, done, failed=False)
        if i % 20 == 0:
            await asyncio.sleep(0.05)
    return decisions, staleness


def _publisher_row(config: SwitchyardConfig) -> dict[str, Any]:
    """One server's own publisher (the real one) against a stand-in health and metrics
    endpoint serving realistic metrics text: its CPU per second, on the server's host."""
    metrics = _realistic_metrics_text()
    (port,) = free_ports(1)
    serving = _serve_metrics(port, metrics)
    publisher = LoadPublisher(
        config, POOL, "publisher-probe", f"http://127.0.0.1:{port}/v2/health/ready", f"http://127.0.0.1:{port}/metrics"
    )
    thread_cpu = _ThreadCpu("load-publisher")
    publisher.start()
    time.sleep(1.0)
    cpu_before, wall = thread_cpu.read(), time.monotonic()
    time.sleep(IDLE_WINDOW_S)
    pct = 100 * (thread_cpu.read() - cpu_before) / (time.monotonic() - wall)
    publisher.stop()
    serving.set()
    return {"case": "one server's publisher", "publisher_cpu_pct": round(pct, 2), "metrics_bytes": len(metrics)}


def _realistic_metrics_text() -> str:
    """What a Triton server with the CPU engine exports: Triton's own families for the four
    models, and the engine's (contracts/metric_names.py)."""
    lines = []
    for family in ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
                   "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                   "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
                   "nv_inference_compute_output_duration_us", "nv_inference_pending_request_count"):  # fmt: skip
        lines.append(f"# HELP {family} x\n# TYPE {family} counter")
        for model in ("llm", "preprocessing", "cpu_engine", "postprocessing"):
            lines.append(f'{family}{{model="{model}",version="1"}} 12345')
    labels = 'model="cpu_engine",version="1"'
    lines.append("# TYPE nv_trt_llm_kv_cache_block_metrics gauge")
    for kind, value in (("max", 5000), ("free", 3100), ("used", 1900), ("tokens_per", 16), ("reused", 77)):
        lines.append(f'nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type="{kind}",{labels}}} {value}')
    lines.append("# TYPE nv_trt_llm_request_metrics gauge")
    for kind, value in (("active", 12), ("max", 256), ("scheduled", 12), ("context", 1), ("waiting", 0)):
        lines.append(f'nv_trt_llm_request_metrics{{request_type="{kind}",{labels}}} {value}')
    lines.append("# TYPE switchyard_engine_requests gauge")
    lines.append(f'switchyard_engine_requests{{request_class="interactive",{labels}}} 9')
    lines.append(f'switchyard_engine_requests{{request_class="bulk",{labels}}} 3')
    lines.append("# TYPE switchyard_engine_kv_blocks gauge")
    lines.append(f'switchyard_engine_kv_blocks{{request_class="bulk",{labels}}} 300')
    lines.append("# TYPE switchyard_engine_heartbeat gauge")
    lines.append(f"switchyard_engine_heartbeat{{{labels}}} {time.time():.3f}")
    return "\n".join(lines) + "\n"


def _serve_metrics(port: int, text: str) -> threading.Event:
    """A stand-in server's health and metrics endpoints, on a thread; set the event to stop."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = text.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            payload = body if self.path == "/metrics" else b""
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    stop = threading.Event()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def shut_down() -> None:
        stop.wait()
        httpd.shutdown()

    threading.Thread(target=shut_down, daemon=True).start()
    return stop


class _ThreadCpu:
    """CPU seconds of this process's thread named `name` (Linux /proc)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def read(self) -> float:
        import os

        tick = os.sysconf("SC_CLK_TCK")
        for thread in threading.enumerate():
            if thread.name == self._name and thread.native_id is not None:
                fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / tick
        raise LookupError(f"no thread {self._name!r}")


# -- the request path ------------------------------------------------------------------------


class _FastBackend:
    """Emits `tokens` deltas at once: what the gateway spends per request and per event."""

    def __init__(self) -> None:
        self.tokens = 10

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        for i in range(self.tokens - 1):
            yield GenerationDelta(text="tok ", token_ids=(i,))
        yield GenerationDelta(text="end", token_ids=(self.tokens,), finish_reason="length")

    async def cancel(self, request_id: str) -> bool:
        return False

    async def readiness(self) -> list[PoolReadiness]:
        return [PoolReadiness(POOL, POOL, True)]

    async def close(self) -> None:
        return None


async def _request_rows(config: SwitchyardConfig) -> list[dict[str, Any]]:
    from gateway.app import create_app
    from gateway.settings import GatewaySettings
    from quota.capacity import StaticCapacity
    from quota.keys import SyncKeyStore

    backend = _FastBackend()
    app = create_app(
        GatewaySettings(), backend_factory=lambda *_: backend, config=config,
        capacity=StaticCapacity({POOL: 10_000_000}),
    )  # fmt: skip
    team = next(iter(config.teams))
    key = SyncKeyStore(sync_redis_client(config, "admin"), config.teams).create(team)
    sync = sync_redis_client(config, "admin")
    rows: list[dict[str, Any]] = []
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://gateway", headers={"Authorization": f"Bearer {key}"}
        ) as client,
    ):
        registry = app.state.services.registry
        counter = ClientCommands(config.redis_url("admin"))
        for tokens in REPLY_TOKENS:
            for with_id in (False, True):
                backend.tokens = tokens
                await _one(client, registry, tokens, with_id, "warm")
                _forget_results(sync)
                sent, executed = counter.count(), _executed(sync)
                cpu = time.process_time()
                for i in range(REQUESTS_PER_LENGTH):
                    await _one(client, registry, tokens, with_id, str(i))
                cpu_ms = (time.process_time() - cpu) * 1e3 / REQUESTS_PER_LENGTH
                rows.append(
                    {
                        "case": f"request, {tokens} tokens, {'caller id' if with_id else 'no id'}",
                        "gateway_cpu_ms_per_request": round(cpu_ms, 3),
                        "redis_commands_sent": round((counter.count() - sent) / REQUESTS_PER_LENGTH, 2),
                        "redis_commands_run": round((_executed(sync) - executed) / REQUESTS_PER_LENGTH, 2),
                        "redis_bytes_kept": round(_kept_bytes(sync) / REQUESTS_PER_LENGTH),
                    }
                )
        counter.stop()
    _per_event(rows)
    sync.close()
    return rows


def _per_event(rows: list[dict[str, Any]]) -> None:
    """CPU per streamed event: the slope between the 10- and 2,000-token replies."""
    by_case = {row["case"]: row for row in rows}
    short, long = by_case["request, 10 tokens, no id"], by_case["request, 2000 tokens, no id"]
    slope_us = (long["gateway_cpu_ms_per_request"] - short["gateway_cpu_ms_per_request"]) * 1e3 / 1990
    rows.append({"case": "per streamed event", "gateway_cpu_us_per_event": round(slope_us, 2)})


async def _one(client: httpx.AsyncClient, registry: Any, tokens: int, with_id: bool, tag: str) -> None:
    body: dict[str, Any] = {"model": POOL, "prompt": "the quick brown fox", "max_tokens": tokens, "stream": True}
    if with_id:
        body["request_id"] = f"scale-{tokens}-{tag}-{time.time_ns()}"
    response = await client.post("/v1/generate", json=body)
    assert response.status_code == 200, response.text[:300]
    await registry.settled()


def _executed(r: redis.Redis) -> int:
    stats: dict[str, dict[str, int]] = r.info("commandstats")  # type: ignore[assignment]
    return sum(stat["calls"] for name, stat in stats.items() if name not in ("cmdstat_info", "cmdstat_monitor"))


def _kept_bytes(r: redis.Redis) -> int:
    """What the finished requests left in Redis: their records (MEMORY USAGE of sy:req:*)."""
    return sum(int(r.memory_usage(key) or 0) for key in r.scan_iter("sy:req:*"))


def _forget_results(r: redis.Redis) -> None:
    for key in r.scan_iter("sy:req:*"):
        r.delete(key)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


if __name__ == "__main__":
    main(sys.argv[1:])
