"""S7 on the real stack: a `tritonserver` SIGKILLed while it streams replies. The gateway
resumes each cut reply on the other server; every reply completes, token for token what an
uninterrupted run writes (greedy and seeded sampling), and usage counts each token once. And S8:
a drained server finishes its replies and gets nothing new; a hot prefix spreads over both."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from build_engines.repository import fill_repository
from config.redis_client import redis_client, sync_redis_client
from config.settings import Ports
from fleet_state.load_board import LoadBoard
from fleet_state.registry import ServerInfo, ServerRegistry, server_key
from fleet_state.server_state import ServerState
from server_host.load_publisher import LoadPublisher
from server_host.ports import free_ports
from server_host.process import wait_until
from server_host.triton_server import TritonServer

from .conftest import LiveGateway, TritonPool

pytestmark = pytest.mark.integration

# Eight replies of ~1,820 tokens: the kill must land while the killed server still writes
# some (with four, the fast in-process engine finished them all first). Eight leases need
# both servers' KV, so the uninterrupted reference runs REFERENCE_STREAMS at a time, which fit
# one server (8,192): the first requests after the fixture may be admitted before the gateway
# has read the second server's capacity (a loaded run got 429 there).
STREAMS = 8
REFERENCE_STREAMS = 4
# Long enough that the kill lands mid-reply however loaded the machine: at 950 tokens a reply
# took ~1.6 s and on a loaded CI machine all eight ended between the trigger and the kill.
MAX_TOKENS = 1800
DRAIN_MAX_TOKENS = 1800  # ... and that the drain does
# Leases of prompt + max_tokens: once fo-a drains, admission counts only fo-b's 8,192 tokens, so
# the long replies and the new short ones must fit there.
DRAIN_STREAMS = 4
AFTER_DRAIN_MAX_TOKENS = 32


class Fleet:
    """Two servers of the tiny pool registered for the live gateway, heartbeated while alive."""

    def __init__(self, gateway: LiveGateway, servers: dict[str, TritonServer]) -> None:
        self.gateway = gateway
        self.servers = servers
        self.alive = set(servers)
        self._redis = sync_redis_client(gateway.config, "admin")
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)
        self._publishers: list[LoadPublisher] = []

    def register(self, pool_id: str) -> None:
        async def register_all() -> None:
            client = redis_client(self.gateway.config, "admin")
            registry = ServerRegistry(client)
            now = time.time()
            for server_id, server in self.servers.items():
                ports = server.ports
                info = ServerInfo(server_id, pool_id, "127.0.0.1", ports.http, ports.grpc, ports.metrics, (),
                                  ServerState.READY, now, now)  # fmt: skip
                await registry.register(info)
                # What each server's own `switchyard triton` process does: publish its load.
                publisher = LoadPublisher(self.gateway.config, pool_id, server_id, info.health_url, info.metrics_url)
                publisher.start()
                self._publishers.append(publisher)
            await client.aclose()

        asyncio.run(register_all())
        self._beat.start()

    def reported(self, pool_id: str) -> bool:
        """Whether every fleet server's load is on the board (admission counts a server's KV
        only from its report: before both are in, the pool holds one server's 8,192 tokens)."""

        async def read() -> set[str]:
            client = redis_client(self.gateway.config, "admin")
            try:
                return set((await LoadBoard(client).read([pool_id])).get(pool_id, {}))
            finally:
                await client.aclose()

        return set(self.servers) <= asyncio.run(read())

    def kill(self, server_id: str) -> None:
        self.alive.discard(server_id)
        pid = self.servers[server_id].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        self._stop.set()
        self._beat.join(timeout=2)
        for publisher in self._publishers:
            publisher.stop()
        self._redis.close()

        async def deregister_all() -> None:  # as a supervisor does: gateways hear of it at once
            client = redis_client(self.gateway.config, "admin")
            registry = ServerRegistry(client)
            for server_id in self.servers:
                await registry.deregister(server_id)
            await client.aclose()

        asyncio.run(deregister_all())

    def _heartbeat(self) -> None:
        while not self._stop.wait(0.3):
            for server_id in list(self.alive):
                self._redis.hset(server_key(server_id), "heartbeat_at", repr(time.time()))


@pytest.fixture
def fleet(triton_pool: TritonPool, live_gateway: LiveGateway) -> Iterator[Fleet]:
    repository = fill_repository(triton_pool.config, triton_pool.pool_id)
    servers = {}
    for name in ("fo-a", "fo-b"):
        http, grpc, metrics = free_ports(3)
        servers[name] = TritonServer(
            repository,
            Ports(http=http, grpc=grpc, metrics=metrics),
            var_dir=triton_pool.config.var_path,
            name=name,
            inference_key=triton_pool.config.triton_inference_key(),
            host=triton_pool.config.network.servers.bind_host,
            keepalive=triton_pool.config.network.triton_grpc,
        )
    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(server.start) for server in servers.values()]:
            future.result()
    fleet = Fleet(live_gateway, servers)
    try:
        fleet.register(triton_pool.pool_id)
        assert wait_until(lambda: fleet.reported(triton_pool.pool_id), 60, interval_s=0.1), "loads never reported"
        # Until the gateway's directory has read them it routes to the session's configured
        # server, which no test here kills: wait until a request reaches one of the fleet's.
        assert wait_until(lambda: _reaches_fleet(live_gateway, servers), 60, interval_s=0.1), "never routed"
        yield fleet
    finally:
        fleet.close()
        for server in servers.values():
            server.stop()
        # The gateway falls back to the session's configured server once it has heard the
        # servers leave (and read that one's metrics).
        url = live_gateway.url
        assert wait_until(lambda: httpx.get(f"{url}/readyz", timeout=5).status_code == 200, 30), "never ready again"


def _stream(
    url: str,
    headers: dict[str, str],
    prompt: str,
    started: threading.Event,
    max_tokens: int = MAX_TOKENS,
    seed: int | None = None,
) -> dict[str, object]:
    """Greedy, or sampled at temperature 0.9 with `seed` (token i depends only on (seed, i))."""
    sampling = {"temperature": 0.0} if seed is None else {"temperature": 0.9, "seed": seed}
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            **sampling}  # fmt: skip
    text, final, deltas = [], None, 0
    token_ids: list[int] = []
    with httpx.stream("POST", f"{url}/v1/generate", json=body, headers=headers, timeout=120) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line.removeprefix("data: "))
            if "text" in event and "usage" not in event:
                text.append(event["text"])
                token_ids.extend(event.get("token_ids", []))
                deltas += 1
                if deltas == 2:
                    started.set()
            else:
                final = event
    return {"text": "".join(text), "token_ids": token_ids, "final": final}


def test_a_server_killed_mid_reply_costs_the_clients_nothing(fleet: Fleet, live_gateway: LiveGateway) -> None:
    url, headers = live_gateway.url, live_gateway.headers
    prompts = [f"failover story number {i} about a river" for i in range(STREAMS)]
    seeds = [None if i % 2 == 0 else 1000 + i for i in range(STREAMS)]  # half greedy, half seeded sampling
    with ThreadPoolExecutor(REFERENCE_STREAMS) as few:
        reference = list(
            few.map(
                lambda ps: _stream(url, headers, ps[0], threading.Event(), seed=ps[1]), zip(prompts, seeds, strict=True)
            )
        )
    with ThreadPoolExecutor(STREAMS) as pool:
        received = {name: _llm_requests(server)[0] for name, server in fleet.servers.items()}
        started = [threading.Event() for _ in prompts]
        futures = [
            pool.submit(_stream, url, headers, p, e, MAX_TOKENS, seed)
            for p, e, seed in zip(prompts, started, seeds, strict=True)
        ]
        log = live_gateway.config.var_path / "logs" / "gw.log"
        failovers_before = log.read_text().count("trying another")
        kill_while_held(fleet, STREAMS, received, started)
        replies = [future.result(timeout=120) for future in futures]
    assert log.read_text().count("trying another") > failovers_before  # replies really were cut
    for index, (got, want) in enumerate(zip(replies, reference, strict=True)):
        final = got["final"]
        assert got["token_ids"] == want["token_ids"], f"reply {index}"  # token for token the same reply
        # The text too, but for U+FFFD: where a reply is cut inside a character split across
        # tokens (the tiny model writes such bytes all the time), the resuming server may render
        # invalid bytes as another number of replacement characters. Known; see the issue note.
        assert str(got["text"]).replace("\ufffd", "") == str(want["text"]).replace("\ufffd", ""), f"reply {index}"
        assert isinstance(final, dict) and final.get("stop_reason") == "length", final
        assert final["usage"]["completion_tokens"] == MAX_TOKENS  # each token counted once


def kill_while_held(fleet: Fleet, streams: int, received: dict[str, int], started: list[threading.Event]) -> None:
    """Kill the server holding the most of the new requests (then: that took more), as soon as
    the engines' gauges (published every 0.1 s) show half of the `streams` held, or, should
    they not, once the first clients have tokens. The gauges come first: a loaded machine's
    clients read their replies late, when the servers may have finished them."""
    load: dict[str, tuple[int, int]] = {}

    def holding() -> bool:
        for name, server in fleet.servers.items():
            taken, held = _llm_requests(server)
            load[name] = (held, taken - received[name])
        return sum(held for held, _ in load.values()) >= max(1, streams // 2) or all(e.is_set() for e in started[:4])

    assert wait_until(holding, 60, interval_s=0.01), f"the engines held {load} of {streams} requests"
    fleet.kill(max(load, key=lambda name: load[name]))


def _reaches_fleet(gateway: LiveGateway, servers: dict[str, TritonServer]) -> bool:
    """Whether a one-token request goes to one of `servers`."""
    before = sum(_llm_requests(server)[0] for server in servers.values())
    body = {"model": "tiny", "prompt": "which server", "max_tokens": 1}
    reply = httpx.post(f"{gateway.url}/v1/generate", json=body, headers=gateway.headers, timeout=30)
    assert reply.status_code == 200, reply.text
    return sum(_llm_requests(server)[0] for server in servers.values()) > before


def _llm_requests(server: TritonServer) -> tuple[int, int]:
    """(requests the `llm` model has taken, requests its engine holds now) on one server. The
    decoupled `llm` counts a request as a success when it has taken it, not when it ends."""
    text = httpx.get(f"http://127.0.0.1:{server.ports.metrics}/metrics", timeout=5).text
    done = held = 0
    for line in text.splitlines():
        if line.startswith("nv_inference_request_success{") and 'model="llm"' in line:
            done += int(float(line.rsplit(" ", 1)[1]))
        if line.startswith("nv_trt_llm_request_metrics{") and ('"active"' in line or '"waiting"' in line):
            held += int(float(line.rsplit(" ", 1)[1]))
    return done, held


def test_a_drained_server_finishes_its_replies_and_gets_no_new_work(fleet: Fleet, live_gateway: LiveGateway) -> None:
    url, headers = live_gateway.url, live_gateway.headers
    drained = fleet.servers["fo-a"]
    before, _ = _llm_requests(drained)
    prompts = [f"drain story number {i} about a harbour" for i in range(DRAIN_STREAMS)]
    with ThreadPoolExecutor(DRAIN_STREAMS + 8) as pool:
        started = [threading.Event() for _ in prompts]
        futures = [
            pool.submit(_stream, url, headers, p, e, DRAIN_MAX_TOKENS) for p, e in zip(prompts, started, strict=True)
        ]
        assert all(event.wait(60) for event in started), "the streams never got going"
        admin = {"Authorization": f"Bearer {live_gateway.admin_key}"}
        reply = httpx.post(f"{url}/admin/servers/fo-a/drain", headers=admin, timeout=10)
        assert reply.status_code == 202 and reply.json()["state"] == "draining", reply.text
        received_at_drain, _ = _llm_requests(drained)
        assert received_at_drain > before, "no stream went to fo-a: the test proves nothing"
        time.sleep(1.0)  # every gateway process has read the new state
        fresh = [
            pool.submit(_stream, url, headers, f"after the drain {i}", threading.Event(), AFTER_DRAIN_MAX_TOKENS)
            for i in range(8)
        ]
        replies = [future.result(timeout=120) for future in [*futures, *fresh]]
    for got, tokens in zip(
        replies, [DRAIN_MAX_TOKENS] * DRAIN_STREAMS + [AFTER_DRAIN_MAX_TOKENS] * 8, strict=True
    ):  # none cut
        final = got["final"]
        assert isinstance(final, dict) and final["usage"]["completion_tokens"] == tokens, final
    assert _llm_requests(drained)[0] == received_at_drain  # nothing new reached it after the drain
    assert httpx.get(f"{url}/admin/servers", headers=headers, timeout=5).status_code == 403  # a team's key


def test_a_hot_prefix_spreads_over_both_servers(fleet: Fleet, live_gateway: LiveGateway) -> None:
    """16 concurrent requests with one 200-token prefix (replies long enough to overlap): the
    first server to hold it would get them all by affinity alone; bounded load (1.25x the mean)
    sends the rest to the other."""
    url, headers = live_gateway.url, live_gateway.headers
    prefix = " ".join(f"shared{i}" for i in range(100))
    base = {name: _llm_requests(server)[0] for name, server in fleet.servers.items()}
    with ThreadPoolExecutor(16) as pool:
        replies = list(
            pool.map(lambda i: _stream(url, headers, f"{prefix} tail {i}", threading.Event(), 400), range(16))
        )
    assert all(isinstance(r["final"], dict) for r in replies)
    served = {name: _llm_requests(server)[0] - base[name] for name, server in fleet.servers.items()}
    assert sum(served.values()) == 16 and min(served.values()) >= 3, served
