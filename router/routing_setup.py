"""The production backend, put together: registry and load board → directory → picker → streams.

Imported only when the gateway serves (tritonclient is heavy)."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client import Counter
from tritonclient.grpc.aio import InferenceServerClient

from config.redis_client import redis_client
from config.settings import SwitchyardConfig
from fleet_state.load_board import LoadBoard
from fleet_state.registry import ServerInfo, ServerRegistry
from router.failover_backend import FailoverBackend
from router.server_directory import ServerDirectory
from router.server_picker import ServerPicker
from router.triton_backend import TritonBackend

DIRECTORY_CONNECTIONS = 4


def failover_backend(
    config: SwitchyardConfig, routed: Counter, host: str = "127.0.0.1", retry_after_s: int = 5
) -> FailoverBackend:
    """Call inside the running event loop (the app's lifespan): the directory starts refreshing.
    `routed` counts the router's choices by pool and reason (`GatewayMetrics.routed`)."""
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
        streams.add_target(info.server_id, InferenceServerClient(url=info.grpc_url), model_id)

    def removed(server_id: str) -> None:
        picker.forget_server(server_id)
        client = streams.detach_target(server_id)  # at once: the same id may be added back next
        if client is not None:
            task = asyncio.get_running_loop().create_task(client.close())
            closing.add(task)
            task.add_done_callback(closing.discard)

    directory = ServerDirectory(config, ServerRegistry(client), LoadBoard(client), http, added, removed, host=host)
    picker = ServerPicker(config, directory, routed=routed)

    async def close() -> None:
        await directory.close()
        await http.aclose()
        await client.aclose()

    directory.start()
    return FailoverBackend(picker, streams, retry_after_s=retry_after_s, capacity=directory, on_close=close)
