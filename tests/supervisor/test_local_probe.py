"""`LocalProbe`: a fresh board report is taken as it is; a stale or missing one sends the look
to the server itself (a port with nothing on it here: the answer is "refused", not a guess
from the old report)."""

from __future__ import annotations

import socket

import pytest

from config.settings import Ports
from contracts.engine_metrics import EngineHealth
from fleet_state.load_board import LoadReport
from supervisor.local_probe import LocalProbe


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def report(sampled_at: float) -> LoadReport:
    health = EngineHealth(heartbeat=41.0, capacity_tokens=100, free_tokens=80, active=1, waiting=0)
    return LoadReport("p-0", seq=7, sampled_at=sampled_at, ready=True, health=health)


@pytest.fixture
def ports() -> Ports:
    port = closed_port()
    return Ports(http=port, grpc=port, metrics=port)


async def test_a_fresh_report_is_the_look_and_nothing_is_asked() -> None:
    probe = LocalProbe("0.0.0.0", stale_after_s=0.5, timeout_s=1.0, max_connections=2)
    try:
        look = await probe.look(Ports(http=1, grpc=2, metrics=3), report(sampled_at=100.0), now=100.4)
        assert (look.ready, look.refused, look.engine) == (True, False, report(0).health)
        assert probe.direct_probes == 0
    finally:
        await probe.aclose()


@pytest.mark.parametrize("stale", [report(sampled_at=100.0), None], ids=["stale report", "no report"])
async def test_a_stale_or_missing_report_asks_the_server_itself(ports: Ports, stale: LoadReport | None) -> None:
    probe = LocalProbe("0.0.0.0", stale_after_s=0.5, timeout_s=1.0, max_connections=2)
    try:
        look = await probe.look(ports, stale, now=100.6)
        # The old report said ready and beating; the server's port says nothing listens.
        assert (look.ready, look.refused, look.engine) == (False, True, None)
        assert probe.direct_probes == 1
    finally:
        await probe.aclose()


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        LocalProbe("127.0.0.1", stale_after_s=0, timeout_s=1.0, max_connections=2)
