"""A server host whose link goes quiet mid-reply (no FIN, no RST: a host powered off, a switch
port dead): the gateway's keepalive PINGs notice within seconds, and the reply resumes on
another server, token for token what an uninterrupted reply writes.

    root namespace: FailoverBackend ──gRPC, keepalive──▶ 10.231.N.10 host a: switchyard triton
                                    ──gRPC, keepalive──▶ 10.231.N.11 host b: switchyard triton

Each server is the real `switchyard triton` process, in a network namespace of its own, bound
to that host's address from `network.servers.bind_host` (faults/netns_hosts.py).
Without keepalive the cut reply would wait for TCP's retransmissions to give up: ~15 minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncGenerator, Collection, Iterator
from dataclasses import dataclass

import httpx
import pytest

from build_engines.repository import fill_repository
from config.network_settings import NetworkSpec, ServerAddresses
from config.settings import SwitchyardConfig, dump_config
from contracts.generation import BackendError, GenerationDelta, GenerationRequest, PoolReadiness
from faults.chaos_stack import tritonserver_of
from faults.netns_hosts import BridgedHost, NamespacesUnavailable, bridged_hosts, process_subnet
from router.failover_backend import FailoverBackend
from router.routing_setup import server_client
from router.triton_backend import TritonBackend
from server_host.ports import free_ports
from server_host.process import ManagedProcess, wait_until
from stack.secret_files import ensure_secret_files

from .conftest import MODEL_ID, POOL_ID, TinyModel

pytestmark = pytest.mark.integration

# Long enough that the cut lands mid-reply on any machine: the cut follows the first tokens.
MAX_TOKENS = 2000
# From the link's loss to the first token the second server sends: the target.
FAILOVER_BOUND_S = 5.0
FLAP_S = 2.0  # the partitions bench's flap: down this long, then up this long


@dataclass
class ServerOnHost:
    host: BridgedHost
    process: ManagedProcess
    grpc_url: str
    http_url: str


@pytest.fixture
def hosts() -> Iterator[list[BridgedHost]]:
    try:
        with bridged_hosts(["a", "b"], subnet=process_subnet()) as net:
            yield list(net.hosts.values())
    except NamespacesUnavailable as exc:
        pytest.skip(f"no network namespaces here: {exc}")


@pytest.fixture
def servers(tiny_model: TinyModel, hosts: list[BridgedHost]) -> Iterator[dict[str, ServerOnHost]]:
    """`switchyard triton` on each host, bound to the host's address as its config says."""
    fill_repository(tiny_model.config, POOL_ID)
    ensure_secret_files(tiny_model.config.secrets_path)
    started: dict[str, ServerOnHost] = {}
    try:
        for copy, host in enumerate(hosts, start=21):  # copies no other test's server uses
            config = _on_host(tiny_model.config, host)
            path = dump_config(config, config.var_path / "run" / f"quiet-{host.name}.yaml")
            http, grpc, metrics = free_ports(3)
            argv = [sys.executable, "-m", "switchyard.cli", "--config", str(path), "triton", "--pool", POOL_ID,
                    "--copy", str(copy), "--ports", f"{http},{grpc},{metrics}", "--no-fill"]  # fmt: skip
            log = config.var_path / "logs" / f"quiet-{host.name}.log"
            process = ManagedProcess(f"server on {host.name}", host.command(argv), log, env={**os.environ})
            process.start()
            started[host.name] = ServerOnHost(host, process, f"{host.address}:{grpc}", f"http://{host.address}:{http}")
        for server in started.values():  # ready, seen from the gateway's namespace
            assert wait_until(lambda s=server: _ready(s) or not s.process.alive(), 180), server.process.log_tail()
            assert server.process.alive(), server.process.log_tail()
        yield started
    finally:
        for server in started.values():
            server.host.restore()
            server.process.stop(timeout_s=20.0)


def _on_host(config: SwitchyardConfig, host: BridgedHost) -> SwitchyardConfig:
    network = NetworkSpec(servers=ServerAddresses(bind_host=host.address))
    return config.model_copy(update={"network": network})


def _ready(server: ServerOnHost) -> bool:
    try:
        return httpx.get(f"{server.http_url}/v2/health/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


class InOrder:
    """The picker: the servers in the given order, skipping those tried."""

    def __init__(self, servers: list[str]) -> None:
        self._servers = servers

    def pick(self, request: GenerationRequest, exclude: Collection[str]) -> str | None:
        return next((s for s in self._servers if s not in exclude), None)

    def started(self, server_id: str, request: GenerationRequest) -> None:
        pass

    def ended(self, server_id: str, request: GenerationRequest, failed: bool) -> None:
        pass

    async def readiness(self) -> list[PoolReadiness]:
        return []


class Timeline:
    """The real streams, with when each server's stream failed and sent its first delta."""

    def __init__(self, streams: TritonBackend) -> None:
        self._streams = streams
        self.failed_at: dict[str, float] = {}
        self.first_delta_at: dict[str, float] = {}
        self.on_delta: list[tuple[str, GenerationDelta]] = []

    async def stream_on(self, server_id: str, request: GenerationRequest) -> AsyncGenerator[GenerationDelta, None]:
        try:
            async with contextlib.aclosing(self._streams.stream_on(server_id, request)) as deltas:
                async for delta in deltas:
                    self.first_delta_at.setdefault(server_id, time.monotonic())
                    self.on_delta.append((server_id, delta))
                    yield delta
        except BackendError:
            self.failed_at[server_id] = time.monotonic()
            raise

    async def cancel(self, request_id: str) -> bool:
        return await self._streams.cancel(request_id)

    async def close(self) -> None:
        await self._streams.close()


def _request() -> GenerationRequest:
    return GenerationRequest(
        request_id=f"quiet-{uuid.uuid4().hex[:8]}", model_id=MODEL_ID, prompt="a long story about a quiet link",
        max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True,
    )  # fmt: skip


async def test_a_reply_on_a_link_gone_quiet_resumes_on_another_server_within_seconds(
    tiny_model: TinyModel, servers: dict[str, ServerOnHost]
) -> None:
    await _cut_mid_reply(tiny_model, servers, flaps=0)


async def test_a_link_that_flapped_first_is_still_noticed_within_seconds(
    tiny_model: TinyModel, servers: dict[str, ServerOnHost]
) -> None:
    """A flap delivers the PINGs it held back at once, and a gRPC client told `too_many_pings`
    doubles its PING interval for good: a link that flapped must still be noticed within the
    keepalive's bound."""
    await _cut_mid_reply(tiny_model, servers, flaps=3)


async def test_a_server_that_stops_answering_is_left_within_seconds(
    tiny_model: TinyModel, servers: dict[str, ServerOnHost]
) -> None:
    """`bench partitions` once saw three replies go unnoticed for 61 s ("Stream removed (ping
    timeout)") after a flap. The cause: gRPC's keepalive timeout alone never closed a link whose
    PINGs went unanswered, only its one-minute `ping_timeout` did; a cut link was noticed in
    3 s because the kernel gave up on bytes nobody acknowledged. A server that is frozen
    (SIGSTOP: its kernel still acknowledges every byte, its gRPC answers no PING) is that case
    without the kernel's help: 60.1 s before `TritonKeepalive.channel_options` set
    `ping_timeout_ms`."""
    await _cut_mid_reply(tiny_model, servers, flaps=0, freeze=True)


async def _cut_mid_reply(
    tiny_model: TinyModel, servers: dict[str, ServerOnHost], *, flaps: int, freeze: bool = False
) -> None:
    """Host a goes silent mid-reply: its link cut, or (`freeze`) its tritonserver stopped."""
    config = tiny_model.config
    keepalive = config.network.triton_grpc
    a, b = list(servers)
    clients = {name: server_client(server.grpc_url, keepalive) for name, server in servers.items()}
    streams = TritonBackend(clients, dict.fromkeys(clients, MODEL_ID), headers=config.triton_grpc_headers())
    timeline = Timeline(streams)
    frozen: int | None = None
    try:
        # What one server writes uninterrupted (and both channels are connected).
        reference = [t async for d in FailoverBackend(InOrder([b]), timeline).generate(_request()) for t in d.token_ids]
        assert len(reference) == MAX_TOKENS
        for _ in range(flaps):  # the link down and up, the channels to host a connected
            servers[a].host.cut()
            await asyncio.sleep(FLAP_S)
            servers[a].host.restore()
            await asyncio.sleep(FLAP_S)
        timeline.failed_at.clear()
        timeline.first_delta_at.clear()

        backend = FailoverBackend(InOrder([a, b]), timeline)
        tokens: list[int] = []
        cut_at: float | None = None
        async for delta in backend.generate(_request()):
            tokens.extend(delta.token_ids)
            if cut_at is None and tokens:  # mid-reply: silence from host a from now on
                if freeze:
                    frozen = tritonserver_of(servers[a].process.pid or 0)
                    assert frozen is not None, servers[a].process.log_tail()
                    os.kill(frozen, signal.SIGSTOP)
                else:
                    servers[a].host.cut()
                cut_at = time.monotonic()
        assert cut_at is not None
    finally:
        if frozen is not None:
            os.kill(frozen, signal.SIGCONT)
        await streams.close()

    assert a in timeline.failed_at and b in timeline.first_delta_at, "the reply was not cut: the test proves nothing"
    detected_s = timeline.failed_at[a] - cut_at
    resumed_s = timeline.first_delta_at[b] - cut_at
    what = "server" if freeze else "link"
    print(f"\nquiet {what}: the stream failed {detected_s:.2f} s after the cut, resumed on {b} after {resumed_s:.2f} s")
    assert tokens == reference  # token for token, nothing lost or repeated
    # PINGs every time_ms, an answer due within timeout_ms: the stream fails within their sum.
    assert detected_s <= (keepalive.time_ms + keepalive.timeout_ms) / 1000 + 0.5
    assert resumed_s <= FAILOVER_BOUND_S
