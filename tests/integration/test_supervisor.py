"""The supervisor with real tritonservers and a real Redis: two copies of a pool come up ready; a
killed one is marked dead and relaunched; a board gone stale (Redis refusing the servers'
reports) kills nothing, and a stuck engine is still found behind it; a supervisor started again
takes its servers over; a drained one finishes its in-flight stream, then stops and leaves the registry; SIGTERM to a
server's process drains it the same way.

One fleet for the whole story (each start of a server costs seconds on two cores)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import redis.asyncio as aioredis
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import np_to_triton_dtype

from config.settings import FleetSpec, RedisSpec, SwitchyardConfig
from fleet_state.load_board import LoadBoard, LoadReport
from fleet_state.registry import ServerInfo, ServerRegistry, server_key
from fleet_state.server_state import ServerState
from server_host.ports import FreePorts
from supervisor.supervisor import Supervisor

pytestmark = pytest.mark.integration

POOL = "fleet-tiny"


def fleet_config(base: SwitchyardConfig, redis_url: str, var_dir: Path, secrets_dir: Path) -> SwitchyardConfig:
    """The session's tiny model in a pool of two copies, with this test's Redis and var folder."""
    pool = next(iter(base.pools.values())).model_copy(update={"target_copies": 2})
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    return base.model_copy(
        update={
            "pools": {POOL: pool},
            "redis": RedisSpec(port=port),
            "var_dir": str(var_dir),
            "secrets_dir": str(secrets_dir),
            "fleet": FleetSpec(drain_settle_s=0.5),
        }
    )


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float, interval_s: float = 0.05) -> float:
    """Seconds until `check()` held; fails the test after `timeout_s`."""
    began = time.monotonic()
    while not await check():
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"not true after {timeout_s} s")
        await asyncio.sleep(interval_s)
    return time.monotonic() - began


# Long enough to outlast the supervisor's next pass (it sends the drain's SIGTERM) on a busy
# machine: the tiny model writes a token a millisecond or so.
DRAIN_REPLY_TOKENS = 6000


@dataclass
class Stream:
    """A streamed `llm` reply, as it arrives."""

    tokens: int = 0
    finish_reason: str = ""
    finished: bool = False
    error: str | None = None
    first_token: asyncio.Event = field(default_factory=asyncio.Event)


async def stream_llm(grpc_url: str, max_tokens: int, reply: Stream, headers: dict[str, str]) -> None:
    def tensor(name: str, array: np.ndarray) -> grpcclient.InferInput:
        value = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        value.set_data_from_numpy(array)
        return value

    inputs = [
        tensor("text_input", np.array([b"Drain me gently"], dtype=np.object_)),
        tensor("max_tokens", np.array([max_tokens], dtype=np.int32)),
        tensor("ignore_eos", np.array([True])),
    ]

    async def requests() -> AsyncIterator[dict[str, object]]:
        yield {"model_name": "llm", "inputs": inputs, "request_id": "drained", "enable_empty_final_response": True}

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        async for result, error in client.stream_infer(requests(), headers=headers):
            if error is not None:
                reply.error = str(error)
                return
            if result.as_numpy("output_token_ids") is not None:
                reply.tokens += len(result.as_numpy("output_token_ids"))
                reply.finish_reason = result.as_numpy("finish_reason")[0].decode()
                reply.first_token.set()
            if result.get_response().parameters["triton_final_response"].bool_param:
                reply.finished = True
                return
    finally:
        await client.close()


def tritonserver_pid(wrapper_pid: int) -> int:
    return int(subprocess.check_output(["pgrep", "-P", str(wrapper_pid), "tritonserver"]).split()[0])


def engine_stub_pid(server_pid: int) -> int:
    """The Python stub that runs the engine (Triton's child whose command line names its
    model.py): `llm`'s own when the engine runs in it (the default), else `cpu_engine`'s."""
    for model in ("cpu_engine", "llm"):
        found = subprocess.run(["pgrep", "-P", str(server_pid), "-f", f"{model}/1/model.py"], capture_output=True)
        if found.returncode == 0:
            return int(found.stdout.split()[0])
    raise LookupError(f"tritonserver {server_pid} runs no engine stub")


class FreezableBoard(LoadBoard):
    """The real board, which can be made to answer its last read again and again: what a
    supervisor sees while Redis refuses every publisher's writes (LOADING, NOREPLICAS)."""

    def __init__(self, client: aioredis.Redis) -> None:
        super().__init__(client)
        self.frozen = False
        self._last: dict[str, dict[str, LoadReport]] | None = None

    async def read(self, pool_ids: Iterable[str]) -> dict[str, dict[str, LoadReport]]:
        if not self.frozen or self._last is None:
            self._last = await super().read(pool_ids)
        return self._last


async def _gone(pid: int) -> bool:
    return gone(pid)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


async def test_a_fleet_restarts_the_dead_and_drains_on_request_or_sigterm(
    tiny_model,  # type: ignore[no-untyped-def]
    redis_url: str,
    redis_secrets: Path,
    tmp_path: Path,
) -> None:
    config = fleet_config(tiny_model.config, redis_url, tmp_path / "var", redis_secrets)
    client = aioredis.Redis.from_url(redis_url)
    registry = ServerRegistry(client, config.fleet.dead_after_s)
    ports = FreePorts()
    board = FreezableBoard(client)
    supervisor = Supervisor(config, registry, ports, board)
    watch: asyncio.Task[None] | None = None

    async def server(server_id: str) -> ServerInfo | None:
        return await registry.get(server_id)

    async def state_is(server_id: str, state: ServerState) -> bool:
        info = await server(server_id)
        return info is not None and info.state is state

    try:
        began = time.monotonic()
        await supervisor.start(timeout_s=120)
        print(f"two servers ready in {time.monotonic() - began:.1f} s")
        infos = await registry.servers(POOL)
        assert [(s.server_id, s.state) for s in infos] == [
            (f"{POOL}-0", ServerState.READY),
            (f"{POOL}-1", ServerState.READY),
        ]
        assert len({s.grpc_port for s in infos}) == 2
        first, second = supervisor.copies()
        assert [s.pid for s in infos] == [first.pid, second.pid]
        watch = asyncio.create_task(supervisor.run())

        # SIGKILL the first one's tritonserver, and the second one's own process (its
        # tritonserver dies with it): each is dead within ~2 s, then relaunched on its ports.
        old_pids = [first.pid, second.pid]
        assert None not in old_pids
        orphan = tritonserver_pid(second.pid)  # type: ignore[arg-type]
        os.kill(tritonserver_pid(first.pid), signal.SIGKILL)  # type: ignore[arg-type]
        os.kill(second.pid, signal.SIGKILL)  # type: ignore[arg-type]
        # Watched side by side: a copy is DEAD for one supervisor pass (0.5 s) before its
        # relaunch registers it STARTING again, so one watched after the other can be missed.
        to_deads = await asyncio.gather(
            *(eventually(lambda c=copy: state_is(c.server_id, ServerState.DEAD), 5) for copy in (first, second))
        )
        assert max(to_deads) < 2.5, to_deads
        to_dead = max(to_deads)
        assert await eventually(lambda: _gone(orphan), 2) < 2, "a tritonserver outlived its process"
        for copy in (first, second):
            to_ready = await eventually(lambda c=copy: state_is(c.server_id, ServerState.READY), 90)
        print(f"SIGKILL: dead after {to_dead:.1f} s, ready again {to_ready:.1f} s later")
        assert [first.pid, second.pid] != old_pids and None not in (first.pid, second.pid)
        assert [s.grpc_port for s in await registry.servers(POOL)] == [s.grpc_port for s in infos]  # same ports

        # A READY that a Redis failover lost (acknowledged, never replicated): the supervisor's
        # heartbeats put it back, or no gateway would route to that server again.
        await client.hset(server_key(f"{POOL}-1"), "state", ServerState.STARTING.value)
        restored = await eventually(lambda: state_is(f"{POOL}-1", ServerState.READY), 10)
        print(f"a lost READY restored after {restored:.1f} s")

        # The board stops (every report frozen, as while Redis refuses the publishers' writes):
        # its engine heartbeats read as still for longer than dead_after_s, but a stale report
        # is no verdict; the supervisor asks its servers itself, and kills none (the chaos run:
        # a Redis restart then failover had it kill and relaunch all four servers at once).
        board.frozen = True
        pids = [first.pid, second.pid]
        await asyncio.sleep(config.fleet.dead_after_s * 3)  # a window in which nothing may happen
        assert [first.pid, second.pid] == pids
        assert [s.state for s in await registry.servers(POOL)] == [ServerState.READY, ServerState.READY]

        # SIGKILL the first one's engine stub, the board still frozen: Triton still answers
        # ready, but the engine heartbeat stops, so it is dead within ~2 s and relaunched.
        stub = engine_stub_pid(tritonserver_pid(first.pid))  # type: ignore[arg-type]
        os.kill(stub, signal.SIGKILL)
        to_dead = await eventually(lambda: state_is(f"{POOL}-0", ServerState.DEAD), 5)
        assert to_dead < 3.0, to_dead
        assert second.pid == pids[1]
        await eventually(lambda: state_is(f"{POOL}-0", ServerState.READY), 90)
        board.frozen = False
        print(f"engine stub SIGKILL behind a stale board: dead after {to_dead:.1f} s")

        # The supervisor killed and started again long after its servers started (past
        # startup_timeout_s): it takes them over as they are, and kills none (the chaos run:
        # a restarted supervisor marked both servers "not ready after 180 s" on its first pass).
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch  # its pass in flight ends before the next supervisor reads the registry
        old_pids = [first.pid, second.pid]
        for copy in (first, second):
            await client.hset(server_key(copy.server_id), "started_at", repr(time.time() - 1000))
        supervisor = Supervisor(config, registry, ports, LoadBoard(client))
        await supervisor.start(timeout_s=60)
        first, second = supervisor.copies()
        assert [first.pid, second.pid] == old_pids
        assert [s.state for s in await registry.servers(POOL)] == [ServerState.READY, ServerState.READY]
        watch = asyncio.create_task(supervisor.run())

        # Drain the second one while a reply streams from it: the reply completes, then it goes.
        reply = Stream()
        headers = config.triton_grpc_headers()
        streaming = asyncio.create_task(stream_llm(infos[1].grpc_url, DRAIN_REPLY_TOKENS, reply, headers))
        await asyncio.wait_for(reply.first_token.wait(), 30)
        second_pid = second.pid
        assert second_pid is not None
        assert await registry.request_drain(f"{POOL}-1")

        async def signalled() -> bool:  # the supervisor has sent its process SIGTERM
            return second.state is ServerState.DRAINING

        await eventually(signalled, 2)
        assert not reply.finished, "the reply ended before the drain began: make it longer"
        drained_in = await eventually(lambda: _deregistered(registry, f"{POOL}-1"), 60)
        await asyncio.wait_for(streaming, 5)
        print(f"drain with a stream in flight: deregistered after {drained_in:.1f} s")
        assert reply.error is None and reply.finished
        assert (reply.tokens, reply.finish_reason) == (DRAIN_REPLY_TOKENS, "length")
        assert gone(second_pid)

        async def retired() -> bool:  # the supervisor reaps it on its next pass, and forgets it
            return [c.server_id for c in supervisor.copies()] == [f"{POOL}-0"]

        await eventually(retired, config.fleet.heartbeat_s * 2 + 5)
        await asyncio.sleep(config.fleet.heartbeat_s * 2)
        assert await retired() and await _deregistered(registry, f"{POOL}-1")  # not relaunched, not back

        # SIGTERM to the first one's process: it marks itself draining, then goes the same way.
        wrapper_pid = first.pid
        os.kill(wrapper_pid, signal.SIGTERM)
        await eventually(lambda: state_is(f"{POOL}-0", ServerState.DRAINING), 5)
        await eventually(lambda: _deregistered(registry, f"{POOL}-0"), 30)
        assert gone(wrapper_pid)
        await asyncio.sleep(config.fleet.heartbeat_s * 2)
        assert supervisor.copies() == [] and await registry.servers(POOL) == []
    finally:
        if watch is not None:
            watch.cancel()
        await supervisor.stop()
        await client.aclose()


async def _deregistered(registry: ServerRegistry, server_id: str) -> bool:
    return await registry.get(server_id) is None
