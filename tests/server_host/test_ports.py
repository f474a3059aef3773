"""Which ports each copy of a pool gets, and the configuration check that keeps them apart."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pydantic import ValidationError

from config.settings import Ports, SwitchyardConfig, load_config
from server_host.ports import ConfiguredPorts, FreePorts, free_ports, port_free


def test_copy_k_uses_the_pool_ports_plus_ten_k() -> None:
    config = load_config()
    ports = ConfiguredPorts(config)
    assert ports.ports("small", 0) == config.pools["small"].ports
    assert ports.ports("small", 1) == Ports(http=8111, grpc=8112, metrics=8113)
    assert ports.ports("large", 1) == Ports(http=8211, grpc=8212, metrics=8213)
    assert config.pools["small"].target_copies == 2 and config.pools["large"].target_copies == 2


def test_free_ports_are_kept_per_copy() -> None:
    ports = FreePorts()
    first = ports.ports("p", 0)
    assert ports.ports("p", 0) == first  # a relaunch comes back where it was
    second = ports.ports("p", 1)
    assert len({first.http, first.grpc, first.metrics, second.http, second.grpc, second.metrics}) == 6


def test_port_free_sees_a_listener() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not port_free("127.0.0.1", port)
    assert port_free("127.0.0.1", port)


def _config(copies: int, large_http: int, large_copies: int = 1) -> SwitchyardConfig:
    raw = {
        "models": {"m": {"weights_uri": "var/models/m", "max_context_tokens": 64}},
        "pools": {
            "small": {"model_id": "m", "target_copies": copies, "ports": {"http": 9101, "grpc": 9102, "metrics": 9103}},
            "large": {
                "model_id": "m",
                "target_copies": large_copies,
                "ports": {"http": large_http, "grpc": large_http + 1, "metrics": large_http + 2},
            },
        },
    }
    return SwitchyardConfig.model_validate(raw)


def test_copies_that_would_share_a_port_are_refused_at_load() -> None:
    assert _config(copies=9, large_http=9201).pools["small"].target_copies == 9
    with pytest.raises(ValidationError, match=r"pool 'large' copy 0 \(http\) and pool 'small' copy 10 \(http\)"):
        _config(copies=11, large_http=9201)
    with pytest.raises(ValidationError, match="above 65535"):
        _config(copies=2, large_http=65528, large_copies=2)


def test_free_ports_lie_below_the_range_outgoing_connections_take() -> None:
    """A port from the ephemeral range may be taken by any client's connection before the
    server binds it (a flake seen on a busy machine): chosen ports stay out of it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    chosen = free_ports(50)
    assert len(set(chosen)) == 50
    assert all(port < low for port in chosen)
    for port in chosen[:5]:  # free when chosen: a server can bind them
        assert port_free("127.0.0.1", port)
