"""Keeps each pool's Triton servers running and registered in Redis, and drains them on request.

    start()   per pool: fill the model repository once, launch its target_copies servers side
              by side (or take over those an earlier, killed supervisor left running),
              return when every one is READY (TritonStartError with the log if not)
    run()     every heartbeat_s, every server at once:

      process exited ─┬─ it was draining, or exit 0 / SIGTERM ─▶ deregister; never restarted
                      └─ otherwise ─────────────────────────▶ DEAD ─▶ relaunch
      registry says DRAINING (`switchyard drain`) ─▶ SIGTERM its process, once
      its load report (what the server's own process publishes: fleet_state/load_board.py; read for
      every server in one call), or, when that report is stale (Redis refusing the publishers'
      writes), the server itself over local HTTP (supervisor/local_probe.py) ─▶ Liveness:
          STARTING ── ready and engine heartbeat advancing ──▶ READY
          READY ── heartbeat still / not ready / no report, for dead_after_s ──▶ DEAD ─▶ kill, relaunch
          STARTING for longer than startup_timeout_s ──▶ DEAD
      seen alive ─▶ registry heartbeat (re-registered if its record is gone: Redis flushed)
      any registry write refused as Fenced (a newer registration holds its id: it was
          replaced while this supervisor was cut off) ─▶ SIGKILL it, forget it; never relaunched

    set_target(pool, n)   (the autoscaler) each pass then moves the pool towards n copies:
              more ─▶ a new copy at the lowest free index below copies_limit, registered
                      STARTING at once, launched after autoscaler.start_delay_s (which stands
                      in for a GPU server's minutes of loading)
              fewer ─▶ drain the surplus (pending first, then starting, then the newest ready):
                      the same path as `switchyard drain`; a drained copy is not replaced
    stop()    SIGINT every server (stop at once, no drain), deregister them

A server is one `switchyard triton --pool P --copy K --server-id P-K --ports ...` process
(`server_host.server_process`) that owns its tritonserver and drains itself on SIGTERM, so a
drain looks the same whoever asked for it. It binds `network.servers.bind_host`, and is
registered at `network.servers.advertised` (this host's address as gateways reach it).
A relaunched server keeps its id (`P-K`) and its ports (the allocator's answer for (P, K)):
clients find it where it was. A drained copy stays gone; the pool runs one fewer until the
supervisor starts again, unless the pool has a target (`set_target`): then a copy drained by
hand is replaced, as a Deployment replaces a pod. Relaunches of a server that keeps failing
before it is ready back off (1 s, 2 s, 4 s ... up to max_restart_backoff_s).

Fencing (fleet_state/epochs.py): each launch takes a new registration epoch, which every
registry write made for it here carries, and so do its process's load reports and drain
(`switchyard triton --epoch`; docs/network.md).
A supervisor judges a server dead only by a fresh look at it (its load report, or the server
itself), and kills what it replaces, on its own host, before relaunching it.
So the one way to two copies of an id is a second registration elsewhere while this host was
cut off (a pod rescheduled, a second supervisor): then this copy's writes are refused and it
is killed here, not served beside its replacement.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from build_engines.repository import fill_repository
from config.settings import SwitchyardConfig, dump_config
from fleet_state.epochs import Fenced
from fleet_state.load_board import LoadBoard, LoadReport
from fleet_state.registry import ServerInfo, ServerRegistry
from fleet_state.server_health import Liveness, Verdict
from fleet_state.server_state import ServerState
from server_host.adopted_process import AdoptedProcess, server_process
from server_host.ports import PortAllocator, port_free
from server_host.process import ManagedProcess
from server_host.server_process import EXIT_DRAINED
from server_host.triton_server import TritonStartError
from supervisor.local_probe import LocalProbe
from supervisor.pool_scaling import CopyView, scale_steps
from supervisor.server_copy import ServerCopy

logger = logging.getLogger(__name__)

_PORT_WAIT_S = 5.0  # a relaunch waits this long for the dead server's ports to close
_STOP_TIMEOUT_S = 20.0  # a server stopping at once: tritonserver unloads in seconds


class Supervisor:
    """Runs `target_copies` servers of each pool in `pool_ids` (default: every pool)."""

    def __init__(
        self,
        config: SwitchyardConfig,
        registry: ServerRegistry,
        ports: PortAllocator,
        board: LoadBoard,
        *,
        pool_ids: Sequence[str] | None = None,
        config_path: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._fleet = config.fleet
        self._registry = registry
        self._ports = ports
        self._board = board
        self._pool_ids = list(pool_ids) if pool_ids is not None else list(config.pools)
        self._config_path = config_path
        # Its servers run on this host: they bind `bind_host` (the supervisor checks their
        # ports there) and are registered at `advertised`, where gateways connect.
        self._addresses = config.network.servers
        self._clock = clock
        self._copies: dict[str, ServerCopy] = {}
        self._relaunch = False  # off during start() (a failure there is an error) and stop()
        self._targets: dict[str, int] = {}  # pools under a target (set_target); others keep what they run
        # A report older than a quarter of dead_after_s is not judged: the server is asked itself.
        self._probe = LocalProbe(
            self._addresses.bind_host,
            stale_after_s=self._fleet.dead_after_s / 4,
            timeout_s=self._fleet.heartbeat_s * 2,
            max_connections=2 * sum(config.pools[p].copies_limit for p in self._pool_ids),
        )

    def copies(self, pool_id: str | None = None) -> list[ServerCopy]:
        """The servers under supervision (drained ones are gone), by id."""
        return sorted(
            (c for c in self._copies.values() if pool_id is None or c.pool_id == pool_id), key=lambda c: c.server_id
        )

    def set_target(self, pool_id: str, copies: int) -> None:
        """Run `copies` copies of the pool from the next pass on (see the module's docstring).
        Raises ValueError for a pool this supervisor does not run or a count beyond
        0..copies_limit (the copies whose ports the configuration reserves)."""
        if pool_id not in self._pool_ids:
            raise ValueError(f"pool {pool_id!r} is not supervised here (pools: {', '.join(self._pool_ids)})")
        limit = self._config.pools[pool_id].copies_limit
        if not 0 <= copies <= limit:
            raise ValueError(f"pool {pool_id!r}: target {copies} is outside 0..{limit} (max_copies)")
        if self._targets.get(pool_id) != copies:
            logger.info("pool %s: target %d copies", pool_id, copies)
        self._targets[pool_id] = copies

    def targets(self) -> dict[str, int]:
        """The pools under a target, and their targets."""
        return dict(self._targets)

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, timeout_s: float | None = None) -> None:
        """Launch every server and wait until all are READY; on failure stop them and raise
        TritonStartError naming the server, with its log."""
        if self._config_path is None:
            self._config_path = dump_config(self._config, self._config.var_path / "run" / "switchyard.yaml")
        timeout_s = self._fleet.startup_timeout_s if timeout_s is None else timeout_s
        try:
            for pool_id in self._pool_ids:
                await asyncio.to_thread(fill_repository, self._config, pool_id)
            for pool_id in self._pool_ids:
                for k in range(self._config.pools[pool_id].target_copies):
                    copy = ServerCopy(pool_id, k, self._ports.ports(pool_id, k), self._fleet.dead_after_s)
                    self._copies[copy.server_id] = copy
                    if not await self._adopt(copy):
                        await self._launch(copy, self._clock())
            deadline = time.monotonic() + timeout_s
            while any(c.state is not ServerState.READY for c in self._copies.values()):
                await self.tick()
                failed = [c for c in self._copies.values() if c.state is ServerState.DEAD]
                if failed:
                    raise TritonStartError(f"server {failed[0].server_id} did not start: {failed[0].last_failure}")
                if time.monotonic() > deadline:
                    slow = [c.server_id for c in self._copies.values() if c.state is not ServerState.READY]
                    raise TritonStartError(f"servers {', '.join(slow)} not ready after {timeout_s:.0f} s")
                await asyncio.sleep(0.2)
        except BaseException:
            await self.stop()
            raise
        self._relaunch = True

    async def run(self) -> None:
        """Check every server each heartbeat_s until cancelled; a Redis outage is logged and
        outlived (the servers keep serving)."""
        while True:
            try:
                await self.tick()
            except Exception:
                logger.exception("supervisor pass failed")
            await asyncio.sleep(self._fleet.heartbeat_s)

    async def stop(self) -> None:
        """Stop every server at once (no drain) and deregister it."""
        self._relaunch = False
        copies, self._copies = list(self._copies.values()), {}
        processes = [c.process for c in copies if c.process is not None]
        await asyncio.gather(*(asyncio.to_thread(p.stop, _STOP_TIMEOUT_S, signal.SIGINT) for p in processes))
        await self._probe.aclose()
        for copy in copies:
            try:
                await self._registry.deregister(copy.server_id, epoch=copy.epoch)
            except Exception:  # Redis already gone (its records read as dead soon anyway), or fenced
                logger.warning("could not deregister %s", copy.server_id)

    # --- one pass ----------------------------------------------------------------------------

    async def tick(self) -> None:
        now = self._clock()
        stored = {info.server_id: info for info in await self._registry.servers(now=now)}
        boards = await self._board.read(self._pool_ids)
        copies = list(self._copies.values())
        await asyncio.gather(
            *(self._check_fenced(c, stored.get(c.server_id), boards[c.pool_id].get(c.server_id), now) for c in copies)
        )
        if self._relaunch:
            for pool_id, target in self._targets.items():
                await self._scale(pool_id, target, now)

    async def _scale(self, pool_id: str, target: int, now: float) -> None:
        pool = self.copies(pool_id)
        views = [CopyView(c.server_id, c.copy, c.state, c.started_at, c.process is not None) for c in pool]
        steps = scale_steps(views, target, self._config.pools[pool_id].copies_limit)
        for k in steps.launch:
            copy = ServerCopy(pool_id, k, self._ports.ports(pool_id, k), self._fleet.dead_after_s, started_at=now)
            copy.relaunch_at = now + self._config.autoscaler.start_delay_s
            self._copies[copy.server_id] = copy
            copy.epoch = await self._registry.register(self._info(copy, now))  # STARTING: counted at once
            logger.info("pool %s: adding %s (starts in %.0f s)", pool_id, copy.server_id, copy.relaunch_at - now)
        by_id = {c.server_id: c for c in pool}
        for server_id in steps.drain:
            copy = by_id[server_id]
            logger.info("pool %s: removing %s (target %d)", pool_id, server_id, target)
            if copy.process is None:  # never started, or dead: nothing to drain
                await self._retire(copy)
            else:
                await self._registry.set_state(server_id, ServerState.DRAINING, now, epoch=copy.epoch)
                await self._drain(copy, now)

    async def _check_fenced(
        self, copy: ServerCopy, stored: ServerInfo | None, report: LoadReport | None, now: float
    ) -> None:
        try:
            await self._check(copy, stored, report, now)
        except Fenced as exc:
            await self._fenced(copy, exc)

    async def _fenced(self, copy: ServerCopy, exc: Fenced) -> None:
        """A newer registration holds the copy's id: kill this copy and forget it (the record,
        its load and its id are the replacement's)."""
        logger.error("%s: killing our copy (pid %s), not relaunching it", exc, copy.pid)
        process, copy.process = copy.process, None
        self._copies.pop(copy.server_id, None)
        if process is not None:
            await asyncio.to_thread(process.stop, 0.0, signal.SIGKILL)

    async def _check(self, copy: ServerCopy, stored: ServerInfo | None, report: LoadReport | None, now: float) -> None:
        drain_requested = stored is not None and stored.state is ServerState.DRAINING
        if copy.process is None:
            if drain_requested:  # dead (or not started yet) and asked to go: just go
                await self._retire(copy)
            elif self._relaunch and self._relaunch_due(copy, now):
                await self._launch(copy, now)
            elif copy.pending:
                await self._beat(copy, now)  # waiting out the start delay: STARTING, not dead
            return
        code = copy.process.returncode()
        if code is not None:
            if copy.state is ServerState.DRAINING or drain_requested or code in (EXIT_DRAINED, -signal.SIGTERM):
                await self._retire(copy)
            else:
                await self._mark_dead(copy, now, f"exited with code {code}")
            return
        if drain_requested and copy.state is not ServerState.DRAINING:
            await self._drain(copy, now)
        if copy.state is ServerState.DRAINING:
            await self._check_draining(copy, now)
            return
        verdict = copy.liveness.observe(now, await self._probe.look(copy.ports, report, now))
        if verdict is Verdict.ALIVE:
            if copy.state is ServerState.STARTING and await self._registry.set_state(
                copy.server_id, ServerState.READY, now, epoch=copy.epoch
            ):  # False: a drain request won the race; the next pass acts on it
                logger.info("%s ready (pid %s)", copy.server_id, copy.pid)
                copy.state, copy.failed_starts = ServerState.READY, 0
            await self._beat(copy, now)
        elif verdict is Verdict.DEAD:
            await self._mark_dead(copy, now, copy.liveness.why_dead)
        elif copy.state is ServerState.STARTING:
            if now - copy.watched_since > self._fleet.startup_timeout_s:
                await self._mark_dead(copy, now, f"not ready after {self._fleet.startup_timeout_s:.0f} s")
            else:
                await self._beat(copy, now)  # loading: alive as a process
        # SUSPECT: no heartbeat; the registry ages it to DEAD as soon as we would.

    async def _check_draining(self, copy: ServerCopy, now: float) -> None:
        # Still there, still draining (not DEAD) for readers; a server that has deregistered
        # itself on its way out is not registered again.
        await self._registry.heartbeat(copy.server_id, now, copy.state, epoch=copy.epoch)
        assert copy.drain_started_at is not None and copy.process is not None
        # The process enforces drain_timeout_s itself; this is for one that hangs.
        if now - copy.drain_started_at > self._fleet.drain_timeout_s + _STOP_TIMEOUT_S:
            logger.warning("%s did not finish draining: stopping it", copy.server_id)
            await self._retire(copy)

    # --- transitions -------------------------------------------------------------------------

    async def _launch(self, copy: ServerCopy, now: float) -> None:
        assert self._config_path is not None
        ports = copy.ports
        copy.epoch = await self._registry.next_epoch(copy.server_id)
        argv = [
            sys.executable,
            "-m",
            "switchyard.cli",
            "--config",
            str(self._config_path),
            "triton",
            "--pool",
            copy.pool_id,
            "--copy",
            str(copy.copy),
            "--server-id",
            copy.server_id,
            "--ports",
            f"{ports.http},{ports.grpc},{ports.metrics}",
            "--no-fill",
            "--epoch",  # its load reports and drain carry it: refused once a newer copy holds the id
            str(copy.epoch),
        ]
        log_path = self._config.var_path / "logs" / f"server-{copy.server_id}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        process = ManagedProcess(f"server {copy.server_id}", argv, log_path, env=env)
        process.start()
        copy.process, copy.state, copy.started_at, copy.watched_since = process, ServerState.STARTING, now, now
        copy.liveness, copy.relaunch_at, copy.drain_started_at = Liveness(self._fleet.dead_after_s), None, None
        await self._registry.register(self._info(copy, now))
        logger.info("launched %s (pid %s) on ports %s", copy.server_id, process.pid, ports.model_dump())

    async def _adopt(self, copy: ServerCopy) -> bool:
        """Take over the server an earlier life of this supervisor left running (it was killed
        and started again), rather than launch a second one on its ports
        (`server_host.adopted_process`). It is STARTING until its first live probe."""
        stored = await self._registry.get(copy.server_id)
        if stored is None or stored.pid is None or not server_process(stored.pid, copy.server_id):
            return False
        log_path = self._config.var_path / "logs" / f"server-{copy.server_id}.log"
        copy.process = AdoptedProcess(f"server {copy.server_id}", stored.pid, log_path)
        # STARTING until its heartbeat is seen to advance (a pass or two), however long ago it
        # started: a supervisor restarted past startup_timeout_s must not kill its servers.
        copy.state, copy.started_at, copy.watched_since = ServerState.STARTING, stored.started_at, self._clock()
        copy.epoch = stored.epoch  # the earlier life's registration, which its process carries
        logger.info("took over %s (pid %s), left running by an earlier supervisor", copy.server_id, stored.pid)
        return True

    async def _drain(self, copy: ServerCopy, now: float) -> None:
        """SIGTERM: the server drains itself (its replies finish), then exits 0 and is retired."""
        assert copy.process is not None
        logger.info("draining %s (pid %s)", copy.server_id, copy.pid)
        copy.state, copy.drain_started_at = ServerState.DRAINING, now
        copy.process.send_signal(signal.SIGTERM)

    async def _mark_dead(self, copy: ServerCopy, now: float, reason: str) -> None:
        """Kill it and schedule its relaunch, then say so in the registry: a registry that refuses
        the write (Redis away) must not leave a copy forgotten, unkilled and never relaunched."""
        process, copy.process = copy.process, None
        tail = process.log_tail() if process is not None else ""
        copy.last_failure = f"{reason}\n{tail}"
        logger.warning("%s is dead: %s", copy.server_id, reason)
        copy.state = ServerState.DEAD
        copy.failed_starts = 0 if copy.liveness.ever_alive else copy.failed_starts + 1
        backoff = 0.0 if copy.failed_starts == 0 else 2.0 ** (copy.failed_starts - 1)
        copy.relaunch_at = now + min(backoff, self._fleet.max_restart_backoff_s)
        if process is not None:  # SIGKILL: a dead server gets no drain; its tritonserver dies with it
            await asyncio.to_thread(process.stop, 0.0, signal.SIGKILL)
        await self._registry.set_state(copy.server_id, ServerState.DEAD, now, epoch=copy.epoch)

    async def _retire(self, copy: ServerCopy) -> None:
        """A drained server: reap what is left of it and forget it."""
        process, copy.process = copy.process, None
        if process is not None:
            await asyncio.to_thread(process.stop, _STOP_TIMEOUT_S, signal.SIGINT)
        with contextlib.suppress(Fenced):  # a newer registration's record: not ours to remove
            await self._registry.deregister(copy.server_id, epoch=copy.epoch)
        self._copies.pop(copy.server_id, None)
        logger.info("%s drained and stopped", copy.server_id)

    async def _beat(self, copy: ServerCopy, now: float) -> None:
        if not await self._registry.heartbeat(copy.server_id, now, copy.state, epoch=copy.epoch):
            copy.epoch = await self._registry.register(self._info(copy, now))

    def _info(self, copy: ServerCopy, now: float) -> ServerInfo:
        return ServerInfo(
            server_id=copy.server_id,
            pool_id=copy.pool_id,
            host=self._addresses.advertised,
            http_port=copy.ports.http,
            grpc_port=copy.ports.grpc,
            metrics_port=copy.ports.metrics,
            gpus=(),  # the CPU engine; a GPU engine's copies would get devices here
            state=copy.state,
            started_at=copy.started_at,
            heartbeat_at=now,
            state_since=now,
            pid=copy.pid,
            epoch=copy.epoch,
        )

    def _relaunch_due(self, copy: ServerCopy, now: float) -> bool:
        """Its backoff is over, and its ports are free (or have been taken for too long: the
        new process then fails with a clear error in its log)."""
        if copy.relaunch_at is None or now < copy.relaunch_at:
            return False
        ports = (copy.ports.http, copy.ports.grpc, copy.ports.metrics)
        free = all(port_free(self._addresses.bind_host, port) for port in ports)
        return free or now >= copy.relaunch_at + _PORT_WAIT_S
