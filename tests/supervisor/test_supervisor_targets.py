"""What `Supervisor.set_target` accepts, and how `switchyard servers` shows a pool's target
beside its servers (the scaling itself runs on real servers in
tests/integration/test_autoscaler_e2e.py; which copies go is tests/supervisor/test_pool_scaling.py)."""

from __future__ import annotations

import pytest

from config.settings import SwitchyardConfig
from fleet_state.pool_targets import PoolTarget
from fleet_state.registry import ServerInfo
from fleet_state.server_state import ServerState
from server_host.ports import ConfiguredPorts
from supervisor.supervisor import Supervisor
from switchyard.server_commands import target_row


def config() -> SwitchyardConfig:
    return SwitchyardConfig.model_validate(
        {
            "models": {"m": {"weights_uri": "m", "max_context_tokens": 4096}},
            "pools": {
                "a": {"model_id": "m", "ports": {"http": 9000, "grpc": 9001, "metrics": 9002}, "max_copies": 3},
                "b": {"model_id": "m", "ports": {"http": 9100, "grpc": 9101, "metrics": 9102}},
            },
        }
    )


def supervisor() -> Supervisor:
    cfg = config()
    return Supervisor(cfg, registry=None, ports=ConfiguredPorts(cfg), board=None, pool_ids=["a"])  # type: ignore[arg-type]


def test_targets_within_the_pools_copies_are_kept() -> None:
    sup = supervisor()
    sup.set_target("a", 3)
    sup.set_target("a", 0)
    assert sup.targets() == {"a": 0}


@pytest.mark.parametrize(
    ("pool", "copies", "message"),
    [("a", 4, r"outside 0\.\.3"), ("a", -1, r"outside 0\.\.3"), ("b", 1, "not supervised here"), ("zz", 1, "not")],
)
def test_a_target_it_cannot_run_is_refused(pool: str, copies: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        supervisor().set_target(pool, copies)


def test_servers_shows_the_target_beside_the_servers_in_each_state() -> None:
    def server(server_id: str, pool_id: str, state: ServerState) -> ServerInfo:
        return ServerInfo(server_id, pool_id, "h", 1, 2, 3, (), state, 0.0, 0.0)

    infos = [
        server("a-0", "a", ServerState.READY),
        server("a-1", "a", ServerState.STARTING),
        server("a-2", "a", ServerState.STARTING),
        server("b-0", "b", ServerState.READY),
    ]
    target = PoolTarget("a", 3, 1, 0, 0, ("forecast 6 req/s in 50s needs 3",), 0.0, "supervisor")
    assert target_row(target, infos) == ["a", "3", "1", "2", "0", "forecast 6 req/s in 50s needs 3"]
