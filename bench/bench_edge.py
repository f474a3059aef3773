"""Edge: what one team's maximum-size prompts cost every other team on the same gateway worker.

One gateway process (uvicorn, its own process) over a paced fake backend (a token every
`PACE_S`, no Triton: only the gateway's own work is measured) and a real Redis. Other teams
keep `STREAMS` streams open and probe `/healthz`; meanwhile a hostile team sends prompts of
the largest size the edge lets through (`max_context_tokens x longest_token_bytes` bytes: they
are tokenized, then refused by their token count), two at a time. Variants, side by side:

    quiet      no hostile team (the baseline)
    on-loop    the old path: `Tokenizer.encode`, which holds the GIL for the whole prompt
    off-loop   the edge as built: `encode_batch` on the tokenizer threads, GIL released
    oversize   the edge as built, prompts one byte over the size rule: refused untokenized

Reported: other teams' inter-token gaps (p50, p99, max) and /healthz latency (p50, p99, max),
and each as a ratio to `quiet`.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

from bench.paced_backend import Pace, PacedBackend
from build_engines.corpus import generate_corpus
from build_engines.tokenizer import train_tokenizer
from config.settings import SwitchyardConfig, load_config
from contracts.catalog import ModelCatalog, ServedModel
from contracts.generation import GenerationBackend
from quota.capacity import StaticCapacity
from quota.keys import SyncKeyStore
from report.result_files import write_result

NAME = "edge"
CONTEXT = 36_864  # the `small` model's
PACE_S = 0.005
STREAMS = 16
REPLY_TOKENS = 200
HOSTILE_CONCURRENCY = 2
VARIANTS = ("quiet", "on-loop", "off-loop", "oversize")
CONFIG = """
models:
  small: {{weights_uri: {model_dir}, max_context_tokens: {context}}}
pools:
  small: {{model_id: small, ports: {{http: 9101, grpc: 9102, metrics: 9103}}}}
redis: {{port: {redis_port}, auth: false}}
teams:
  victim: {{weight: 1}}
  hostile: {{weight: 1}}
gateway: {{max_requests_per_key: 100000, max_streams_per_key: 100000}}
"""


@dataclass(frozen=True, slots=True)
class OnLoopModel(ServedModel):
    """The old path: `Tokenizer.encode` holds the GIL for the whole prompt."""

    def encode_prompt(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=True).ids
        return ids


def serve(config_path: str, port: int, on_loop: bool) -> None:
    """One gateway worker (the child process)."""
    import uvicorn

    from gateway.app import create_app
    from gateway.server import uvicorn_stack
    from gateway.settings import GatewaySettings

    config = load_config(Path(config_path))
    catalog = ModelCatalog.load(config)
    if on_loop:
        model = catalog.get("small")
        assert model is not None
        catalog = ModelCatalog({"small": OnLoopModel("small", CONTEXT, model.tokenizer)})

    def backend(*_: Any) -> GenerationBackend:
        return PacedBackend(Pace(PACE_S, (PACE_S, PACE_S)), {"small": "small"})

    settings = GatewaySettings(config=Path(config_path), sse_heartbeat_s=60.0)
    app = create_app(settings, backend, config, StaticCapacity({"small": 10**9}), catalog)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", **uvicorn_stack(settings))


async def _streams(client: httpx.AsyncClient, until: float, gaps: list[float]) -> None:
    body = {"model": "small", "prompt": "the quick brown fox", "max_tokens": REPLY_TOKENS, "stream": True}
    while time.perf_counter() < until:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            last = None
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                now = time.perf_counter()
                if last is not None:
                    gaps.append(now - last)
                last = now


async def _probe(client: httpx.AsyncClient, until: float, latencies: list[float]) -> None:
    while time.perf_counter() < until:
        started = time.perf_counter()
        assert (await client.get("/healthz")).status_code == 200
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.02)


async def _hostile(client: httpx.AsyncClient, until: float, prompt: str, outcomes: list[int]) -> None:
    body = {"model": "small", "prompt": prompt, "max_tokens": 1}
    while time.perf_counter() < until:
        outcomes.append((await client.post("/v1/completions", json=body)).status_code)


async def _load(port: int, keys: dict[str, str], prompt: str | None, seconds: float) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}"
    limits = httpx.Limits(max_connections=100)

    def client(team: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {keys[team]}"}
        return httpx.AsyncClient(base_url=url, headers=headers, timeout=120, limits=limits)

    gaps: list[float] = []
    latencies: list[float] = []
    outcomes: list[int] = []
    async with client("victim") as victim, client("hostile") as hostile:
        until = time.perf_counter() + seconds
        work = [_streams(victim, until, gaps) for _ in range(STREAMS)] + [_probe(victim, until, latencies)]
        if prompt is not None:
            work += [_hostile(hostile, until, prompt, outcomes) for _ in range(HOSTILE_CONCURRENCY)]
        await asyncio.gather(*work)
    return {"gaps": gaps, "healthz": latencies, "hostile": outcomes}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_healthy(port: int, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the gateway did not start")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _tokenizer_file(folder: Path) -> Path:
    """The `small` model's tokenizer if it is built, else one trained the same way."""
    built = load_config().model_dir("small") / "tokenizer.json"
    target = folder / "tokenizer.json"
    if built.is_file():
        shutil.copyfile(built, target)
    else:
        train_tokenizer(generate_corpus(40, 2048), 2048).save(str(target))
    return target


def run(seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-edge-") as tmp:
        root = Path(tmp)
        model_dir = root / "model"
        model_dir.mkdir()
        _tokenizer_file(model_dir)
        redis_port = _free_port()
        redis_proc = subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        try:
            config_path = root / "switchyard.yaml"
            config_path.write_text(CONFIG.format(model_dir=model_dir, context=CONTEXT, redis_port=redis_port))
            config: SwitchyardConfig = load_config(config_path)
            client = redis.Redis(port=redis_port)
            for _ in range(100):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            store = SyncKeyStore(client, config.teams)
            keys = {team: store.create(team) for team in config.teams}
            model = ModelCatalog.load(config).get("small")
            assert model is not None
            max_bytes = model.max_prompt_bytes
            base = " ".join(generate_corpus(5, 2048)) + " "
            fitting = (base * (max_bytes // len(base) + 1)).encode()[:max_bytes].decode(errors="ignore")
            results: dict[str, dict[str, Any]] = {}
            for variant in VARIANTS:
                prompt = {"quiet": None, "oversize": fitting + "x"}.get(variant, fitting)
                port = _free_port()
                context = multiprocessing.get_context("spawn")
                server = context.Process(target=serve, args=(str(config_path), port, variant == "on-loop"))
                server.start()
                try:
                    _wait_healthy(port)
                    results[variant] = asyncio.run(_load(port, keys, prompt, seconds))
                finally:
                    server.terminate()
                    server.join(10)
        finally:
            redis_proc.terminate()
            redis_proc.wait(10)
    return {"results": results, "max_prompt_bytes": max_bytes, "longest_token_bytes": model.longest_token_bytes}


def rows_of(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    quiet = results["quiet"]
    rows = []
    for variant, result in results.items():
        gaps, healthz = result["gaps"], result["healthz"]
        row: dict[str, Any] = {"variant": variant, "hostile_requests": len(result["hostile"])}
        for name, values in (("gap", gaps), ("healthz", healthz)):
            for label, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
                row[f"{name}_{label}_ms"] = 1000 * _quantile(values, q)
        row["gap_p99_x"] = _quantile(gaps, 0.99) / _quantile(quiet["gaps"], 0.99)
        row["healthz_p99_x"] = _quantile(healthz, 0.99) / _quantile(quiet["healthz"], 0.99)
        row["tokens_seen"] = len(gaps)
        row["hostile_status"] = ",".join(str(s) for s in sorted(set(result["hostile"])))
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="load per variant")
    args = parser.parse_args(argv)
    measured = run(args.seconds)
    meta = {
        "backend": f"paced fake, a token every {PACE_S * 1000:g} ms (gateway cost only); real Redis",
        "streams": STREAMS,
        "hostile_concurrency": HOSTILE_CONCURRENCY,
        "context_tokens": CONTEXT,
        "longest_token_bytes": measured["longest_token_bytes"],
        "max_prompt_bytes": measured["max_prompt_bytes"],
        "seconds_per_variant": args.seconds,
        "quiet_gap_median_ms": 1000 * statistics.median(measured["results"]["quiet"]["gaps"]),
    }
    write_result(NAME, rows_of(measured["results"]), meta)


if __name__ == "__main__":
    main()
