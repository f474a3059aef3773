"""How a supervisor looks at a server it runs: the server's own load report when it is fresh,
the server itself over this host's HTTP when it is not.

    board report sampled ≤ stale_after_s ago ──▶ the report's probe (no request of our own)
    report older, or none ────────────────────▶ GET /v2/health/ready and /metrics, here

A report's age says nothing about the engine, only about the path from its publisher to Redis
to us: a Redis that refuses writes (LOADING after a restart, NOREPLICAS while a replica is
away, a failover) stops every server's reports at once. Judged from the board alone, that
reads as every engine stuck, and a supervisor kills and relaunches a whole healthy host (the
chaos run's mass kill, docs/chaos.md). So a verdict is only ever drawn from a fresh look.

The supervisor runs on its servers' host, so the publisher's `sampled_at` and the
supervisor's clock are the same clock: the age needs no skew allowance.
"""

from __future__ import annotations

import httpx

from config.network_settings import local_host
from config.settings import Ports
from fleet_state.load_board import LoadReport
from fleet_state.server_health import Probe, probe_server


class LocalProbe:
    """One per supervisor; `aclose()` when it stops."""

    def __init__(self, bind_host: str, stale_after_s: float, timeout_s: float, max_connections: int) -> None:
        if stale_after_s <= 0 or timeout_s <= 0:
            raise ValueError(f"stale_after_s and timeout_s must be positive, got {stale_after_s}, {timeout_s}")
        self._host = local_host(bind_host)
        self._stale_after_s = stale_after_s
        self._timeout_s = timeout_s
        # Two requests per server at most at once (health, metrics), all on this host.
        self._http = httpx.AsyncClient(limits=httpx.Limits(max_connections=max_connections), timeout=timeout_s)
        self.direct_probes = 0  # looks that went to a server itself: the board was stale

    def fresh(self, report: LoadReport | None, now: float) -> bool:
        return report is not None and now - report.sampled_at <= self._stale_after_s

    async def look(self, ports: Ports, report: LoadReport | None, now: float) -> Probe:
        """The server as it is now: never raises for a sick or absent server."""
        if report is not None and self.fresh(report, now):
            return Probe(report.ready, report.refused, report.health)
        self.direct_probes += 1
        base = f"http://{self._host}"
        return await probe_server(
            self._http, f"{base}:{ports.http}/v2/health/ready", f"{base}:{ports.metrics}/metrics", self._timeout_s
        )

    async def aclose(self) -> None:
        await self._http.aclose()
