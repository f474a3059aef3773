"""The live demonstration at small scale: `switchyard up`'s stack with the autoscaler on, and a
scripted ramp from the load generator (`switchyard load --rehearse`). The pool goes from 1 to 3
servers before the ramp's peak (the rehearsal taught the profile the ramp, so the look-ahead
starts servers a start-up time early), then back to 1 by draining once the load is gone, and
every streamed reply ends with its finish reason: none is cut.

Timings are the brief's shrunk: a decision a second, a new server ready ~10 s after it is asked
for (an 8 s start delay standing in for the eight minutes, plus the tiny server's own ~2 s),
scale-in after 3 s of lower need. The ramp rises in 10 s, faster than a server starts: an
autoscaler that only reacted to the load would have its third server ready after the peak."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from autoscaler.live import LiveOptions
from autoscaler.signals import ServerCapacity
from config.settings import AutoscalerSpec, FleetSpec, Ports, SwitchyardConfig, TeamSpec, dump_config
from fleet_state.registry import SERVERS_KEY, server_key
from server_host.ports import free_ports, port_free
from stack.local_stack import Stack
from switchyard.load_commands import rehearse
from switchyard.load_generator import LoadGenerator
from switchyard.load_ramp import Ramp

from .conftest import MODEL_ID, TinyModel

pytestmark = pytest.mark.integration

POOL = "as-tiny"
START_DELAY_S = 8.0
STARTUP_S = 10.0  # the start delay and a tiny server's own start on two busy cores
# 0.5 req/s (one server), up to 4 req/s (three) by 25 s, held, then gone.
RAMP = Ramp.parse("0:0.5,15:0.5,25:4,35:4,36:0")
# Per server: two replies at once, each holding its seat ~2 s: 0.8 req/s per server at 80% KV.
CAPACITY = ServerCapacity(requests=2.0, tokens_per_s=200.0, avg_request_s=2.0, startup_s=STARTUP_S)
RATE_PER_SERVER = CAPACITY.requests * 0.8 / CAPACITY.avg_request_s


@dataclass(frozen=True)
class Sample:
    t: float  # Unix time
    ready: int
    starting: int
    draining: int


class PoolWatch:
    """The pool's servers by state, read from the registry every 0.2 s in a thread."""

    def __init__(self, redis_url: str) -> None:
        self.samples: list[Sample] = []
        self._redis = redis.Redis.from_url(redis_url, decode_responses=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PoolWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._redis.close()

    def latest(self) -> Sample:
        return self.samples[-1]

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            states = [self._redis.hget(server_key(sid), "state") for sid in self._redis.smembers(SERVERS_KEY)]
            self.samples.append(
                Sample(time.time(), states.count("ready"), states.count("starting"), states.count("draining"))
            )


def _ports_with_copies(copies: int) -> Ports:
    """Free base ports whose copies (+10·k) are free too, and all distinct: the config refuses
    a copy's port that another copy's family already uses (http of copy 0 = metrics of copy 2)."""
    while True:
        http, grpc, metrics = free_ports(3)
        wanted = [p + 10 * k for p in (http, grpc, metrics) for k in range(copies)]
        if len(set(wanted)) == len(wanted) and all(port_free("127.0.0.1", p) for p in wanted):
            return Ports(http=http, grpc=grpc, metrics=metrics)


def autoscaled_config(base: SwitchyardConfig, var_dir: Path) -> SwitchyardConfig:
    gateway_port, redis_port, bulk_metrics, autoscaler_metrics = free_ports(4)
    pool = base.pools[next(iter(base.pools))].model_copy(
        update={"ports": _ports_with_copies(3), "target_copies": 1, "min_copies": 1, "max_copies": 3}
    )
    return base.model_copy(
        update={
            "var_dir": str(var_dir),
            "pools": {POOL: pool},
            "gateway": base.gateway.model_copy(update={"port": gateway_port}),
            "redis": base.redis.model_copy(update={"port": redis_port}),
            "teams": {"dev": TeamSpec()},
            "bulk": base.bulk.model_copy(update={"metrics_port": bulk_metrics}),
            "fleet": FleetSpec(drain_settle_s=0.5),
            "autoscaler": AutoscalerSpec(
                enabled=True,
                interval_s=1.0,
                startup_s=STARTUP_S,
                start_delay_s=START_DELAY_S,
                target_kv_fraction=0.8,
                headroom_servers=0,
                scale_in_after_s=3.0,
                ttft_target_s=30.0,
                metrics_port=autoscaler_metrics,
            ),
        }
    )


def test_a_ramp_scales_the_pool_from_1_to_3_ahead_of_its_peak_and_back_by_draining(
    tiny_model: TinyModel, tmp_path: Path
) -> None:
    config = autoscaled_config(tiny_model.config, tmp_path / "var")
    options = LiveOptions(profile_bin_s=1.0, profile_level_tau_s=2.0)
    stack = Stack(config, autoscaler_options=options, autoscaler_capacities={POOL: CAPACITY})
    with stack, PoolWatch(config.redis_url("admin")) as watch:
        assert stack.default_key_path is not None
        key = stack.default_key_path.read_text().strip()
        start_at = time.time() + 3 * config.autoscaler.interval_s
        assert asyncio.run(rehearse(config, [POOL], RAMP, start_at)) > 0
        generator = LoadGenerator(stack.gateway_url, key, MODEL_ID, max_tokens=16)
        run = asyncio.run(generator.run(RAMP, report_every_s=5.0, on_report=print, start_at=start_at))
        during = [s for s in watch.samples if s.t >= start_at]
        listed = _switchyard(config, "servers")  # after the load: the target is on its way down
        autoscaler_metrics = httpx.get(f"http://127.0.0.1:{config.autoscaler.metrics_port}/metrics", timeout=5).text
        began = time.monotonic()
        while time.monotonic() - began < 40:  # back to one server, the others drained and gone
            last = watch.latest()
            if (last.ready, last.starting, last.draining) == (1, 0, 0):
                break
            time.sleep(0.2)
    samples = watch.samples
    print("\n".join(f"{s.t - start_at:6.1f} s  ready {s.ready} starting {s.starting} draining {s.draining}"
                    for s in samples[::5]))  # fmt: skip

    assert during and during[0].ready == 1 and during[0].starting == 0, "the ramp must start from one server"
    # Ahead: the second server was asked for before the load needed it, the third was ready
    # before the peak.
    first_start = next((s.t - start_at for s in samples if s.starting > 0), None)
    needs_two = next(t / 10 for t in range(10 * int(RAMP.duration_s)) if RAMP.rate_at(t / 10) > RATE_PER_SERVER)
    assert first_start is not None and first_start < needs_two, (first_start, needs_two)
    three = next((s.t - start_at for s in samples if s.ready == 3), None)
    assert three is not None, "the pool never reached three ready servers"
    assert three < RAMP.peak_at(), f"three servers only {three:.1f} s into the ramp: not ahead of its peak"
    assert any(s.draining > 0 for s in samples if s.t - start_at > three), "no server was drained"
    assert (watch.latest().ready, watch.latest().starting, watch.latest().draining) == (1, 0, 0)

    outcomes = run.outcomes
    assert len(outcomes) == len(RAMP.arrivals())
    assert [o.error for o in outcomes if o.error is not None] == []
    assert all(o.stop_reason == "length" for o in outcomes), "a reply ended without its finish reason: cut"
    assert f"{POOL}  " in listed and "why (autoscaler)" in listed, listed  # targets beside actual counts
    assert f'switchyard_autoscaler_target_copies{{pool="{POOL}"}}' in autoscaler_metrics
    decisions = (config.var_path / "logs" / "autoscaler.log").read_text()
    assert f"pool {POOL}: target 3 (" in decisions and "forecast" in decisions, decisions[-2000:]


def _switchyard(config: SwitchyardConfig, *args: str) -> str:
    path = dump_config(config, config.var_path / "run" / "cli.yaml")
    command = [sys.executable, "-m", "switchyard.cli", "--config", str(path), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout
