"""What the live-stack benchmarks share: a stack started on an empty Redis with a key per team
(its config from `stack.measured_stack`), an SSE client that timestamps every delta, a Triton
metrics sampler, and prompts of a given length in tokens."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from tokenizers import Tokenizer

from config.redis_client import sync_redis_client
from config.settings import EngineSpec, SwitchyardConfig
from engine.config import EngineConfig
from quota.keys import SyncKeyStore
from stack.local_stack import Stack, redis_data_dir


def start_stack(config: SwitchyardConfig) -> tuple[Stack, dict[str, dict[str, str]]]:
    """The stack running on an empty Redis, and per team the headers that carry a fresh API
    key of it.

    An earlier run's leases and records would skew this one, so its Redis data goes before
    the stack starts. (Flushing once the stack ran wiped the servers' registrations under the
    gateway: until they registered again it cut the first requests as "left the fleet".)"""
    shutil.rmtree(redis_data_dir(config), ignore_errors=True)
    stack = Stack(config)
    stack.start()
    try:
        client = sync_redis_client(config, "admin")
        store = SyncKeyStore(client, config.teams)
        headers = {team: {"Authorization": f"Bearer {store.create(team)}"} for team in config.teams}
    except BaseException:
        stack.stop()
        raise
    return stack, headers


@dataclass(slots=True)
class StreamTrace:
    """One streamed reply as the client saw it: when each delta arrived and what it held."""

    started: float
    event_times: list[float] = field(default_factory=list)
    event_tokens: list[int] = field(default_factory=list)
    text: str = ""
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    retry_after_s: float | None = None  # the Retry-After of a refused request
    finished: float | None = None

    @property
    def ttft(self) -> float | None:
        return self.event_times[0] - self.started if self.event_times else None

    @property
    def e2e(self) -> float | None:
        return None if self.finished is None else self.finished - self.started

    @property
    def completion_tokens(self) -> int:
        return sum(self.event_tokens)

    def gaps(self, since: float = 0.0, until: float = float("inf")) -> list[float]:
        """Gaps between consecutive deltas whose later end falls in [since, until]."""
        times = self.event_times
        return [b - a for a, b in itertools.pairwise(times) if since <= b <= until]


async def stream_generate(
    client: httpx.AsyncClient, url: str, body: dict[str, object], trace: StreamTrace | None = None
) -> StreamTrace:
    """POST /v1/generate with stream=true and record every SSE delta's arrival time.

    Pass your own `trace` when the task may be cancelled: it keeps what arrived until then."""
    trace = trace or StreamTrace(started=0.0)
    trace.started = time.perf_counter()
    async with client.stream("POST", f"{url}/v1/generate", json={**body, "stream": True}) as response:
        if response.status_code != 200:
            trace.error = f"HTTP {response.status_code}: {(await response.aread()).decode()}"
            retry_after = response.headers.get("retry-after")
            trace.retry_after_s = float(retry_after) if retry_after else None
            trace.finished = time.perf_counter()
            return trace
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            payload = json.loads(data)
            if event == "error":
                trace.error = json.dumps(payload)
                break
            tokens = len(payload.get("token_ids") or [])
            if tokens:
                trace.event_times.append(time.perf_counter())
                trace.event_tokens.append(tokens)
                trace.text += payload.get("text", "")
            if "usage" in payload and payload.get("stop_reason") is not None:
                trace.stop_reason = payload["stop_reason"]
                trace.usage = payload["usage"]
    trace.finished = time.perf_counter()
    return trace


def start_streams(
    client: httpx.AsyncClient, url: str, bodies: list[dict[str, object]]
) -> tuple[list[StreamTrace], list[asyncio.Task[StreamTrace]]]:
    """Open one stream per body in the background; the traces fill as deltas arrive."""
    traces = [StreamTrace(started=0.0) for _ in bodies]
    tasks = [asyncio.create_task(stream_generate(client, url, b, t)) for b, t in zip(bodies, traces, strict=True)]
    return traces, tasks


async def stop_streams(tasks: list[asyncio.Task[StreamTrace]]) -> None:
    """Close background streams (the gateway cancels their requests) and wait for them."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def read_kv_metrics(metrics_url: str) -> dict[str, float]:
    """`nv_trt_llm_kv_cache_block_metrics` and `nv_trt_llm_request_metrics` as a flat dict."""
    with urllib.request.urlopen(metrics_url, timeout=2) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("nv_trt_llm_") and "{" in line:
            name, rest = line.split("{", 1)
            labels, value = rest.rsplit("}", 1)
            kind = labels.split('"')[1] if '"' in labels else labels
            values[f"{name}.{kind}"] = float(value)
    return values


def read_inference_count(metrics_url: str, model: str = "llm") -> int:
    """Triton's `nv_inference_count` of `model`. For the decoupled `llm` a request counts when
    its `execute` returns, which is as it arrives, not when its last response goes."""
    with urllib.request.urlopen(metrics_url, timeout=2) as response:
        text = response.read().decode()
    label = f'model="{model}"'
    for line in text.splitlines():
        if line.startswith("nv_inference_count{") and label in line:
            return int(float(line.rsplit(" ", 1)[1]))
    raise ValueError(f"{metrics_url} reports no nv_inference_count for model {model!r}")


class MetricsSampler:
    """Samples a Triton server's engine metrics on a thread every `interval_s`."""

    def __init__(self, metrics_url: str, interval_s: float = 0.05) -> None:
        self.metrics_url = metrics_url
        self.interval_s = interval_s
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.samples.append(read_kv_metrics(self.metrics_url))
            except OSError:
                continue

    def __enter__(self) -> MetricsSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def prompt_of(tokenizer: Tokenizer, n_tokens: int, seed: int) -> str:
    """Text that tokenizes to about `n_tokens` tokens (bos included), distinct per seed."""
    words = [
        "river",
        "signal",
        "lantern",
        "quiet",
        "copper",
        "meadow",
        "orbit",
        "paper",
        "harbor",
        "ember",
        "violet",
        "granite",
        "willow",
        "cipher",
        "thunder",
        "marble",
        "falcon",
        "tide",
    ]
    parts: list[str] = []
    state = seed * 2654435761 % 2**32 or 1
    while len(parts) < n_tokens + 8:
        state = (state * 1103515245 + 12345) % 2**31
        parts.append(words[state % len(words)] + str(state % 97))
    ids = tokenizer.encode(" ".join(parts)).ids
    # Drop bos (re-encoding adds it back); decoding and re-encoding may shift the count by a
    # token or two at the cut, which "about" allows.
    return str(tokenizer.decode(ids[1:n_tokens]))


def load_tokenizer(config: SwitchyardConfig, model_id: str) -> Tokenizer:
    return Tokenizer.from_file(str(Path(config.model_dir(model_id)) / "tokenizer.json"))


def engine_config_of(spec: EngineSpec) -> EngineConfig:
    """The engine configuration a pool's servers run with (what its config.pbtxt carries)."""
    return EngineConfig(**spec.model_dump())
