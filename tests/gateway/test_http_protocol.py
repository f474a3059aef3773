"""Every gateway connection sends small writes at once (TCP_NODELAY), including on the
listening socket uvicorn binds for several workers (protocol number 0)."""

from __future__ import annotations

import socket
from typing import Any

from gateway.http_protocol import NoDelayH11Protocol, set_nodelay
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
    assert seen["http"] is NoDelayH11Protocol
