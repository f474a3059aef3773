"""The production backend, put together: registry and load board → directory → picker → streams.

Imported only when the gateway serves (tritonclient is heavy)."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client import Counter
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE
from tritonclient.grpc.aio import InferenceServerClient

from config.network_settings import TritonKeepalive
from config.redis_client import redis_client
from config.settings import SwitchyardConfig
from fleet_state.load_board import LoadBoard
from fleet_state.registry import ServerInfo, ServerRegistry
from router.failover_backend import FailoverBackend
from router.server_directory import MEMBERSHIP_GRACE_S, ServerDirectory
from router.server_picker import ServerPicker
from router.triton_backend import TritonBackend

DIRECTORY_CONNECTIONS = 4


def server_client(grpc_url: str, keepalive: TritonKeepalive) -> InferenceServerClient:
    """The gRPC client of one server (`host:port`, as registered): its channel PINGs the server
    after `keepalive.time_ms` without a frame, idle or not, and closes when any PING goes
    unanswered for `timeout_ms`, so a reply on a link gone quiet fails over in seconds
    (config/network_settings.py; the servers accept these PINGs: `TritonKeepalive.server_args`)."""
    # tritonclient's own message limits, which it sets only when given no options.
    limits = [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
    ]
    return InferenceServerClient(url=grpc_url, channel_args=limits + keepalive.channel_options())


def failover_backend(config: SwitchyardConfig, routed: Counter, retry_after_s: int = 5) -> FailoverBackend:
    """Call inside the running event loop (the app's lifespan): the directory starts refreshing.
    `routed` counts the router's choices by pool and reason (`GatewayMetrics.routed`). Each
    server is reached where the registry says it listens; a pool with none registered, at its
    configured ports on `network.servers.advertised`."""
    # Every inference call carries the key Triton demands (server_host/triton_server.py):
    # only gateways hold it, so only they reach the models.
    streams = TritonBackend({}, {}, retry_after_s=retry_after_s, headers=config.triton_grpc_headers())
    # The directory's reads: the load board every 0.1 s, the registry when it changes; a few
    # connections whatever the traffic (docs/capacity.md counts them per worker).
    client = redis_client(
        config, "gateway", socket_timeout=2.0, socket_connect_timeout=2.0, max_connections=DIRECTORY_CONNECTIONS
    )
    http = httpx.AsyncClient()
    closing: set[asyncio.Task[None]] = set()

    def added(info: ServerInfo) -> None:
        model_id = config.pools[info.pool_id].model_id
        streams.add_target(info.server_id, server_client(info.grpc_url, config.network.triton_grpc), model_id)

    def removed(server_id: str) -> None:
        picker.forget_server(server_id)
        client = streams.detach_target(server_id)  # at once: the same id may be added back next
        if client is not None:
            task = asyncio.get_running_loop().create_task(client.close())
            closing.add(task)
            task.add_done_callback(closing.discard)

    # Membership (a server's connection) outlives a stopped heartbeat by MEMBERSHIP_GRACE_S;
    # routing follows the load reports' freshness (`fleet.dead_after_s`).
    registry = ServerRegistry(client, dead_after_s=max(MEMBERSHIP_GRACE_S, config.fleet.dead_after_s))
    directory = ServerDirectory(
        config, registry, LoadBoard(client), http, added, removed, host=config.network.servers.advertised
    )
    picker = ServerPicker(config, directory, routed=routed)

    async def close() -> None:
        await directory.close()
        await http.aclose()
        await client.aclose()

    directory.start()
    return FailoverBackend(picker, streams, retry_after_s=retry_after_s, capacity=directory, on_close=close)
