"""The door's `grpc.aio` server: one in each gateway worker process, started by the app's
lifespan, so each serves with its own worker's `GenerationService` (and its registry, leases,
metering) exactly as that worker's HTTP routes do.

Several workers listen on the one `gateway.grpc_port` with SO_REUSEPORT, as uvicorn's workers
share the HTTP port: the kernel spreads connections over them. A gRPC connection carries many
calls, so a client's calls stay on one worker; everything workers must agree on (keys, leases,
request ids, cancels, usage) is in Redis, as for HTTP. One worker alone binds without
SO_REUSEPORT, so a port already taken is an error rather than a silently shared port
(`gateway/server.py` checks the port before it starts several).

A client host gone dark (no FIN, no RST) is found by the door's keepalive PINGs within
`network.door_grpc` time_ms + timeout_ms (15 s by default): its calls are cancelled, so their
leases are released and their usage metered as for a disconnect (config/network_settings.py).

Messages are bounded by `gateway.max_body_bytes`: gRPC refuses a larger one before any handler
reads it (RESOURCE_EXHAUSTED), as the HTTP edge refuses a larger body unread.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc
from tritonclient.grpc import service_pb2_grpc

from config.settings import SwitchyardConfig
from gateway.deps import Services
from gateway.edge_keys import KeyCache
from gateway.grpc_door.service import InferenceDoor
from gateway.key_slots import KeySlots
from serving.metrics import GatewayMetrics

# How long in-flight calls may run on at shutdown before they are cancelled.
SHUTDOWN_GRACE_S = 5.0


@contextlib.asynccontextmanager
async def serving_door(
    config: SwitchyardConfig,
    host: str,
    port: int,
    *,
    services: Services,
    keys: KeyCache,
    slots: KeySlots | None,
    metrics: GatewayMetrics,
    workers: int,
) -> AsyncIterator[grpc.aio.Server]:
    """Serve the door on `host:port` for the block; its calls are cancelled at the end (each
    generation then ends as a disconnect ends it: cancelled, its lease released, its usage
    metered)."""
    limit = config.gateway.max_body_bytes
    server = grpc.aio.server(
        options=[
            ("grpc.so_reuseport", 1 if workers > 1 else 0),
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", -1),
            # Keepalive both ways and bounded connection lives (network.door_grpc).
            *config.network.door_grpc.server_options(),
        ]
    )
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceDoor(services, keys, slots, metrics), server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    server.add_insecure_port(address)  # raises RuntimeError when the port cannot be bound
    await server.start()
    try:
        yield server
    finally:
        await server.stop(SHUTDOWN_GRACE_S)
