"""Every gateway connection sends small writes at once (TCP_NODELAY), including on the
listening socket uvicorn binds for several workers (protocol number 0), with either protocol
on either loop."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import uvicorn

from gateway.http_protocol import NoDelayH11Protocol, set_nodelay
from gateway.httptools_protocol import NoDelayHttpToolsProtocol
from gateway.server import serve


class Transport:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> Any:
        return self.sock if name == "socket" else None


def test_an_accepted_connection_gets_nodelay_where_asyncio_would_skip_it() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:  # as uvicorn binds it
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()) as client:
            accepted, _ = listener.accept()
            with accepted:
                assert accepted.proto == 0  # asyncio's own nodelay looks for IPPROTO_TCP
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
                set_nodelay(Transport(accepted))  # type: ignore[arg-type]
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
                client.sendall(b"x")


def test_unix_sockets_are_left_alone() -> None:
    left, right = socket.socketpair()
    with left, right:
        set_nodelay(Transport(left))  # type: ignore[arg-type]  # no TCP options: no error


def test_the_gateway_serves_with_it(monkeypatch: Any) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr("gateway.server.uvicorn.run", lambda app, **options: seen.update(options))
    from config.settings import load_config

    serve(load_config(), port=1)  # one worker: the app is built, not served
    assert seen["http"] is NoDelayHttpToolsProtocol and seen["loop"] == "uvloop"


def test_h11_on_asyncio_stays_a_setting(monkeypatch: Any) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr("gateway.server.uvicorn.run", lambda app, **options: seen.update(options))
    from config.settings import load_config
    from gateway.settings import GatewaySettings

    serve(load_config(), port=1, settings=GatewaySettings(http_protocol="h11", event_loop="asyncio"))
    assert seen["http"] is NoDelayH11Protocol and seen["loop"] == "asyncio"


async def ok_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


@pytest.mark.asyncio(loop_factories=["asyncio", "uvloop"])
@pytest.mark.parametrize("protocol", [NoDelayHttpToolsProtocol, NoDelayH11Protocol], ids=["httptools", "h11"])
async def test_a_served_connection_has_nodelay(protocol: type[asyncio.Protocol]) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # protocol number 0, as uvicorn binds it
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(ok_app, log_level="warning", lifespan="off", http=protocol))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        _, writer = await asyncio.open_connection(*listener.getsockname())
        while not server.server_state.connections:
            await asyncio.sleep(0.01)
        (connection,) = server.server_state.connections
        accepted = connection.transport.get_extra_info("socket")  # type: ignore[attr-defined]
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        writer.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=10)
        listener.close()
