"""Is a Triton server alive, and how busy is it: one probe, and the verdict from successive ones.

A probe reads two endpoints of one server:

    GET http://host:http_port/v2/health/ready    200: Triton and its models are loaded
    GET http://host:metrics_port/metrics          the engine's gauges (contracts/engine_metrics.py)

Triton answers ready even when a model's Python stub has crashed, so readiness alone is not
liveness: the engine host sets `switchyard_engine_heartbeat` every ~0.2 s while its stub runs.

    alive  =  health ready  AND  heartbeat advanced within dead_after_s
    dead   =  it was alive once, and now: connection refused, heartbeat still for
              dead_after_s, or not ready for dead_after_s

The heartbeat is compared with its previous value, never with this machine's clock, so a
server on another host with a skewed clock reads the same.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

import httpx

from contracts.engine_metrics import EngineHealth, parse_engine_health


@dataclass(frozen=True, slots=True)
class Probe:
    """One look at a server."""

    ready: bool  # /v2/health/ready answered 200
    refused: bool  # nothing listens on the HTTP port: the server is gone, not slow
    engine: EngineHealth | None  # None: the metrics could not be read


async def probe_server(client: httpx.AsyncClient, health_url: str, metrics_url: str, timeout_s: float) -> Probe:
    """Read a server's health and metrics concurrently; never raises for a sick server."""

    async def health() -> tuple[bool, bool]:
        try:
            response = await client.get(health_url, timeout=timeout_s)
        except httpx.ConnectError:
            return False, True
        except httpx.HTTPError:
            return False, False
        return response.status_code == 200, False

    async def engine() -> EngineHealth | None:
        try:
            response = await client.get(metrics_url, timeout=timeout_s)
            response.raise_for_status()
            return parse_engine_health(response.text)
        except (httpx.HTTPError, ValueError):
            return None

    (ready, refused), engine_health = await asyncio.gather(health(), engine())
    return Probe(ready, refused, engine_health)


class Verdict(str, enum.Enum):
    STARTING = "starting"  # never alive yet: loading (a start timeout is the caller's)
    ALIVE = "alive"
    SUSPECT = "suspect"  # was alive, not now, for less than dead_after_s: a slow scrape
    DEAD = "dead"


class Liveness:
    """Successive probes of one server run → a verdict. One instance per server process."""

    def __init__(self, dead_after_s: float) -> None:
        if dead_after_s <= 0:
            raise ValueError(f"dead_after_s must be positive, got {dead_after_s}")
        self._dead_after_s = dead_after_s
        self._heartbeat: float | None = None
        self._advanced_at: float | None = None  # when the heartbeat last changed
        self._alive_at: float | None = None  # when a probe last found it alive
        self.why_dead = ""  # set with a DEAD verdict, for the log

    @property
    def ever_alive(self) -> bool:
        return self._alive_at is not None

    def observe(self, now: float, probe: Probe) -> Verdict:
        beat = probe.engine.heartbeat if probe.engine is not None else None
        if beat is not None and beat != self._heartbeat:
            if self._heartbeat is not None:  # the first value seen proves nothing yet
                self._advanced_at = now
            self._heartbeat = beat
        beating = self._advanced_at is not None and now - self._advanced_at <= self._dead_after_s
        if probe.ready and beating:
            self._alive_at = now
            return Verdict.ALIVE
        if self._alive_at is None:
            return Verdict.STARTING
        if probe.refused:
            self.why_dead = "connection refused"
        elif not beating:
            self.why_dead = f"engine heartbeat unchanged for {now - (self._advanced_at or now):.1f} s"
        elif now - self._alive_at > self._dead_after_s:
            self.why_dead = f"not ready for {now - self._alive_at:.1f} s"
        else:
            return Verdict.SUSPECT
        return Verdict.DEAD
