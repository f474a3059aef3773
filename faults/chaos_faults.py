"""The chaos run's seeded fault injector: one fault every `interval_s`, its kinds in a seeded
order that repeats (every kind comes once before any comes twice), each recorded in the
history with its time and target.

    kill-tritonserver   SIGKILL a server's tritonserver (its wrapper sees it; the supervisor relaunches)
    kill-engine-stub    SIGKILL the Python stub that runs a server's engine (`llm`'s own, or
                        `cpu_engine`'s when it is a model of its own)
    kill-gateway-worker SIGKILL one uvicorn worker (uvicorn starts another)
    kill-dispatcher     SIGKILL the bulk dispatcher; the run starts it again
    kill-supervisor     SIGKILL the supervisor; the run starts it again (the servers live on)
    restart-redis       stop redis-server (the primary) and start it again on its append-only file
    failover-redis      SIGKILL the Redis primary: the sentinels promote the replica; the old
                        primary comes back as a replica (sentinel mode only)
    drain               ask a server to drain (`switchyard drain`); the pool's target replaces it
    freeze              SIGSTOP a tritonserver for FREEZE_S, then SIGCONT
    fill-disk           fill a team's blob storage budget with files until the gateway says 413,
                        hold it FILL_HOLD_S, then delete them
"""

from __future__ import annotations

import asyncio
import os
import random
import signal

import httpx

from faults.chaos_history import History
from faults.chaos_stack import ChaosStack, children, engine_stub_of, tritonserver_of

KINDS = (
    "kill-tritonserver",
    "kill-engine-stub",
    "kill-gateway-worker",
    "kill-dispatcher",
    "kill-supervisor",
    "restart-redis",
    "drain",
    "freeze",
    "fill-disk",
)
SENTINEL_KINDS = ("failover-redis",)
FREEZE_S = 4.0
FILL_HOLD_S = 5.0
FILL_FILE_BYTES = 1 << 20
ATTEMPTS = 3


class FaultInjector:
    """Injects faults into `stack` until stopped; `fill_team` is the team whose disk fills."""

    def __init__(self, stack: ChaosStack, history: History, seed: int, fill_team: tuple[str, dict[str, str]]) -> None:
        self._stack = stack
        self._history = history
        self._rng = random.Random(seed)
        self._fill_team = fill_team
        self.kinds = KINDS + (SENTINEL_KINDS if stack.replicas is not None else ())
        self.errors: list[str] = []  # a fault the injector could not inject (no target, say)

    def schedule(self, count: int) -> list[str]:
        """`count` fault kinds: seeded rounds of every kind."""
        kinds: list[str] = []
        while len(kinds) < count:
            round_ = list(self.kinds)
            self._rng.shuffle(round_)
            kinds += round_
        return kinds[:count]

    async def run(self, kinds: list[str], interval_s: float, stop: asyncio.Event) -> None:
        for kind in kinds:
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
                return
            except TimeoutError:
                pass
            for attempt in range(ATTEMPTS):  # a target can vanish under the injector (killed just before)
                try:
                    await self.inject(kind)
                    break
                except Exception as exc:  # recorded, and the run goes on
                    if attempt == ATTEMPTS - 1:
                        self.errors.append(f"{kind}: {exc!r}")
                    await asyncio.sleep(2.0)

    async def inject(self, kind: str) -> None:
        stack, history = self._stack, self._history
        if kind == "kill-gateway-worker":
            assert stack.gateway is not None and stack.gateway.pid is not None
            workers = sorted(children(stack.gateway.pid))
            pid = self._rng.choice(workers)[0]
            os.kill(pid, signal.SIGKILL)
            history.fault(kind, f"worker pid {pid}")
        elif kind == "kill-dispatcher":
            assert stack.dispatcher is not None and stack.dispatcher.pid is not None
            os.kill(stack.dispatcher.pid, signal.SIGKILL)
            history.fault(kind, f"pid {stack.dispatcher.pid}")
            await asyncio.to_thread(stack.restart_dispatcher)
        elif kind == "kill-supervisor":
            assert stack.supervisor_process is not None and stack.supervisor_process.pid is not None
            os.kill(stack.supervisor_process.pid, signal.SIGKILL)
            history.fault(kind, f"pid {stack.supervisor_process.pid}")
            await asyncio.to_thread(stack.restart_supervisor)
        elif kind in ("restart-redis", "failover-redis"):
            at = history.now()
            action = stack.restart_redis if kind == "restart-redis" else stack.fail_over_redis
            history.fault(kind, "redis primary", await asyncio.to_thread(action), at=at)
        elif kind == "fill-disk":
            await self._fill_disk(kind)
        else:
            await self._server_fault(kind)

    async def _server_fault(self, kind: str) -> None:
        stack = self._stack
        ready = [sid for sid in stack.server_ids() if stack.server_record(sid).get("state") == "ready"]
        if not ready:
            raise RuntimeError("no ready server")
        server_id = self._rng.choice(sorted(ready))
        if kind == "drain":
            self._history.fault(kind, server_id)
            client = stack.admin_client()
            try:
                await client.post(f"/admin/servers/{server_id}/drain")
            finally:
                await client.aclose()
            return
        wrapper = int(stack.server_record(server_id)["pid"])
        triton = tritonserver_of(wrapper)
        if triton is None:
            raise RuntimeError(f"{server_id} has no tritonserver")
        if kind == "kill-tritonserver":
            os.kill(triton, signal.SIGKILL)
            self._history.fault(kind, server_id, f"pid {triton}")
        elif kind == "kill-engine-stub":
            stub = engine_stub_of(triton)
            if stub is None:
                raise RuntimeError(f"{server_id} has no engine stub")
            os.kill(stub, signal.SIGKILL)
            self._history.fault(kind, server_id, f"pid {stub}")
        elif kind == "freeze":
            os.kill(triton, signal.SIGSTOP)
            self._history.fault(kind, server_id, f"pid {triton} for {FREEZE_S:g} s")
            await asyncio.sleep(FREEZE_S)
            try:
                os.kill(triton, signal.SIGCONT)
            except ProcessLookupError:  # frozen past fleet.dead_after_s: the supervisor killed it as dead
                self._history.fault("freeze-killed", server_id, f"pid {triton} was dead when thawed")
        else:
            raise ValueError(f"unknown fault kind {kind!r}")

    async def _fill_disk(self, kind: str) -> None:
        """Files of FILL_FILE_BYTES until 413; then the budget is full for FILL_HOLD_S."""
        team, headers = self._fill_team
        file_ids: list[str] = []
        refusal = ""
        line = b'{"custom_id": "x", "prompt": "fill", "max_tokens": 1}\n'
        content = line * (FILL_FILE_BYTES // len(line))
        async with httpx.AsyncClient(base_url=self._stack.gateway_url, headers=headers, timeout=60) as client:
            for _ in range(1000):
                reply = await client.post("/v1/files", data={"purpose": "batch"}, files={"file": ("f.jsonl", content)})
                if reply.status_code != 200:
                    refusal = f"HTTP {reply.status_code} {reply.text[:200]}"
                    break
                file_ids.append(reply.json()["id"])
            self._history.fault(kind, team, f"{len(file_ids)} files, then {refusal}")
            if not refusal.startswith("HTTP 413"):
                self.errors.append(f"fill-disk: the full budget answered {refusal or 'nothing'}, not 413")
            await asyncio.sleep(FILL_HOLD_S)
            for file_id in file_ids:
                await client.delete(f"/v1/files/{file_id}")
