"""`network:` in switchyard.yaml: where servers listen and what they tell others, and the gRPC
keepalives that notice a link gone quiet (docs/network.md).

    network:
      servers:                        # this host's Triton servers (`switchyard triton`)
        bind_host: 0.0.0.0            # what tritonserver binds (0.0.0.0: every interface)
        advertise_host: 10.0.3.17     # what the registry records: where gateways connect
      triton_grpc:                    # gateway ─▶ Triton, both ends agree
        time_ms: 1500
        timeout_ms: 1500
      door_grpc:                      # team clients ─▶ the gateway's gRPC door
        time_ms: 10000

A host powered off or a cut cable sends no FIN and no RST: a peer learns of it only by asking.
Each gRPC link here asks with HTTP/2 PINGs: a link whose PING is not answered within
`timeout_ms` is closed, so a stream on it fails (and fails over, router/failover_backend.py)
within `time_ms + timeout_ms` of the link going quiet instead of TCP's minutes.

A server refuses PINGs that come more often than it allows (GOAWAY "too_many_pings", which
kills the connection), so the servers' allowance is derived from the clients' interval here,
in one place: `triton_grpc.server_args()` for tritonserver, and the gateway's channels
(`router.routing_setup.server_client`) PING every `time_ms` on idle connections too, with no
limit on PINGs between data frames, so a link that died between two replies is known dead
before the next reply is sent on it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Addresses that mean "every interface": fine to bind, never an address to give a peer.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})
LOOPBACK_HOST = "127.0.0.1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def local_host(bind_host: str) -> str:
    """The address a process on the same host reaches a socket bound to `bind_host` at: the
    address itself, or loopback for a wildcard bind."""
    return LOOPBACK_HOST if bind_host in WILDCARD_HOSTS else bind_host


class ServerAddresses(_Strict):
    """Where this host's Triton servers listen, and the address the fleet's registry records
    for them (gateways connect there). One machine: loopback for both. A fleet: bind every
    interface (or the host's address) and advertise the host's address (deploy/: the pod IP,
    passed as `switchyard triton --register-host`)."""

    bind_host: str = LOOPBACK_HOST
    # None: the bind address when it names one, else loopback (a wildcard bind on one machine).
    advertise_host: str | None = None

    @model_validator(mode="after")
    def _advertise_concrete(self) -> ServerAddresses:
        if self.advertise_host is not None and self.advertise_host in WILDCARD_HOSTS:
            raise ValueError(
                f"network.servers.advertise_host {self.advertise_host!r} is not an address a gateway can "
                "connect to: give the host's own address (or leave it out on one machine)"
            )
        return self

    @property
    def advertised(self) -> str:
        """What the registry records for a server of this host."""
        return self.advertise_host if self.advertise_host is not None else local_host(self.bind_host)

    @property
    def local(self) -> str:
        """Where this host's own processes (the server's probes, its supervisor) reach it."""
        return local_host(self.bind_host)


class TritonKeepalive(_Strict):
    """gRPC keepalive on the gateway → Triton links, both ends.

    The gateway PINGs each server connection after `time_ms` without a frame from it and
    closes it when the answer is `timeout_ms` late: a reply on a quiet link fails over within
    `time_ms + timeout_ms`. Servers PING gateways the same way (`server_time_ms`), so a
    gateway host gone dark has its replies cancelled and their KV freed. Servers accept a
    client PING every `server_min_ping_interval_ms`, half the clients' interval by default: a
    PING sent a little early (timer jitter) is not a strike, and two strikes are a GOAWAY."""

    time_ms: Annotated[int, Field(ge=500, le=600_000)] = 1500
    timeout_ms: Annotated[int, Field(ge=200, le=600_000)] = 1500
    server_time_ms: Annotated[int, Field(ge=500, le=7_200_000)] = 5000
    server_timeout_ms: Annotated[int, Field(ge=200, le=600_000)] = 2000
    server_min_ping_interval_ms: Annotated[int, Field(ge=100, le=600_000)] | None = None

    @model_validator(mode="after")
    def _servers_accept_the_pings(self) -> TritonKeepalive:
        if self.server_min_ping_interval_ms is not None and self.server_min_ping_interval_ms > self.time_ms:
            raise ValueError(
                f"network.triton_grpc.server_min_ping_interval_ms {self.server_min_ping_interval_ms} is above "
                f"time_ms {self.time_ms}: servers would answer the gateways' keepalive PINGs with GOAWAY "
                "too_many_pings"
            )
        return self

    def channel_options(self) -> list[tuple[str, int]]:
        """The gateway's channel options for one server (`router.routing_setup.server_client`).

        `keepalive_timeout_ms` alone does not bound an unanswered PING (grpcio 1.85): only
        `ping_timeout_ms`, one minute by default, closes the link. A peer whose kernel still
        acknowledges bytes but whose gRPC does not answer (a stopped or wedged tritonserver)
        held a reply 60.1 s; a cut link was noticed in 3 s only because the kernel's
        TCP_USER_TIMEOUT, which gRPC sets from the keepalive timeout, gave up on bytes nobody
        acknowledged. So every PING gets `timeout_ms` (docs/network.md)."""
        return [
            ("grpc.keepalive_time_ms", self.time_ms),
            ("grpc.keepalive_timeout_ms", self.timeout_ms),
            ("grpc.http2.ping_timeout_ms", self.timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]

    @property
    def min_ping_interval_ms(self) -> int:
        """The shortest PING interval servers accept without a strike."""
        if self.server_min_ping_interval_ms is not None:
            return self.server_min_ping_interval_ms
        return self.time_ms // 2

    def server_args(self) -> list[str]:
        """tritonserver's flags: its own PINGs to gateways, and what it accepts from them.
        Pings on idle connections are permitted (a server that does not permit them counts
        every idle PING as a strike)."""
        return [
            f"--grpc-keepalive-time={self.server_time_ms}",
            f"--grpc-keepalive-timeout={self.server_timeout_ms}",
            "--grpc-keepalive-permit-without-calls=1",
            "--grpc-http2-max-pings-without-data=0",
            f"--grpc-http2-min-recv-ping-interval-without-data={self.min_ping_interval_ms}",
            "--grpc-http2-max-ping-strikes=2",
        ]


class DoorKeepalive(_Strict):
    """The gateway's gRPC door (gateway/grpc_door/server.py) towards team clients.

    The door PINGs a client after `time_ms` without a frame and drops the connection when the
    answer is `timeout_ms` late: a client host gone dark has its calls cancelled, so their
    leases are released and their usage metered, within seconds. Clients may PING every
    `min_client_ping_interval_ms` (gRPC's own default is 5 minutes, which punishes clients
    that keep their connections alive; a tritonclient keeps none). An idle connection is
    closed after `max_connection_idle_ms`; every connection after `max_connection_age_ms`
    (with a GOAWAY: its client reconnects, perhaps to another gateway replica, so load
    spreads again after a rollout), its calls given `max_connection_age_grace_ms` to finish:
    as long as the longest reply (fleet.drain_timeout_s)."""

    time_ms: Annotated[int, Field(ge=1000, le=7_200_000)] = 10_000
    timeout_ms: Annotated[int, Field(ge=200, le=600_000)] = 5000
    min_client_ping_interval_ms: Annotated[int, Field(ge=1000, le=600_000)] = 5000
    max_connection_idle_ms: Annotated[int, Field(ge=1000)] = 300_000
    max_connection_age_ms: Annotated[int, Field(ge=1000)] = 1_800_000
    max_connection_age_grace_ms: Annotated[int, Field(ge=0)] = 600_000

    def server_options(self) -> list[tuple[str, int]]:
        """`grpc.aio.server` options."""
        return [
            ("grpc.keepalive_time_ms", self.time_ms),
            ("grpc.keepalive_timeout_ms", self.timeout_ms),
            ("grpc.http2.ping_timeout_ms", self.timeout_ms),  # every PING: TritonKeepalive.channel_options
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", self.min_client_ping_interval_ms),
            ("grpc.http2.max_ping_strikes", 2),
            ("grpc.max_connection_idle_ms", self.max_connection_idle_ms),
            ("grpc.max_connection_age_ms", self.max_connection_age_ms),
            ("grpc.max_connection_age_grace_ms", self.max_connection_age_grace_ms),
        ]


class NetworkSpec(_Strict):
    """Addresses and link liveness (module docstring)."""

    servers: ServerAddresses = ServerAddresses()
    triton_grpc: TritonKeepalive = TritonKeepalive()
    door_grpc: DoorKeepalive = DoorKeepalive()
