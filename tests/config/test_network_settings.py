"""`network:`: addresses, and keepalives both ends of a link agree on."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config.network_settings import DoorKeepalive, ServerAddresses, TritonKeepalive
from config.settings import load_config


def test_one_machine_is_loopback_from_the_file() -> None:
    servers = load_config().network.servers
    assert (servers.bind_host, servers.advertised, servers.local) == ("127.0.0.1", "127.0.0.1", "127.0.0.1")


def test_a_wildcard_bind_advertises_what_it_is_told_and_is_probed_over_loopback() -> None:
    servers = ServerAddresses(bind_host="0.0.0.0", advertise_host="10.0.3.17")
    assert (servers.advertised, servers.local) == ("10.0.3.17", "127.0.0.1")
    assert ServerAddresses(bind_host="10.0.3.17").advertised == "10.0.3.17"


def test_a_wildcard_is_never_advertised() -> None:
    with pytest.raises(ValidationError, match="not an address a gateway can connect to"):
        ServerAddresses(bind_host="0.0.0.0", advertise_host="0.0.0.0")


def test_servers_accept_the_gateways_pings() -> None:
    keepalive = TritonKeepalive()
    args = dict(arg.removeprefix("--").split("=") for arg in keepalive.server_args())
    assert int(args["grpc-http2-min-recv-ping-interval-without-data"]) <= keepalive.time_ms
    assert args["grpc-keepalive-permit-without-calls"] == "1"  # idle-connection PINGs are no strikes
    # A quiet link is noticed within seconds, not TCP's minutes.
    assert keepalive.time_ms + keepalive.timeout_ms <= 5000


def test_a_server_allowance_below_the_gateways_interval_is_refused() -> None:
    with pytest.raises(ValidationError, match="too_many_pings"):
        TritonKeepalive(time_ms=1000, server_min_ping_interval_ms=2000)


def test_the_door_lets_replies_finish_before_an_old_connection_closes() -> None:
    options = dict(DoorKeepalive().server_options())
    drain_timeout_ms = load_config().fleet.drain_timeout_s * 1000
    assert options["grpc.max_connection_age_grace_ms"] >= drain_timeout_ms
    assert options["grpc.http2.min_recv_ping_interval_without_data_ms"] <= options["grpc.keepalive_time_ms"]


def test_every_unanswered_ping_closes_a_link_within_the_keepalive_timeout() -> None:
    """gRPC's keepalive timeout alone never closed a link whose PINGs went unanswered: only its
    `ping_timeout_ms`, a minute by default (tests/integration/test_quiet_link.py measures it)."""
    keepalive = TritonKeepalive(timeout_ms=1200)
    channel = dict(keepalive.channel_options())
    assert channel["grpc.http2.ping_timeout_ms"] == channel["grpc.keepalive_timeout_ms"] == 1200
    assert channel["grpc.keepalive_time_ms"] == keepalive.time_ms
    door = dict(DoorKeepalive(timeout_ms=4000).server_options())
    assert door["grpc.http2.ping_timeout_ms"] == door["grpc.keepalive_timeout_ms"] == 4000
