"""The bulk dispatcher (`switchyard dispatcher`): releases batch entries onto spare room.

Each step:

    refresh (every second)  active batches from Redis; mark those past their deadline or
                            cancelled for sweeping; flag batches at risk; keep held chunks
                            fresh and reclaim a dead dispatcher's
    sweep                   a bounded slice of each expiring or cancelled batch's remaining
                            entries recorded as expired / cancelled
    release                 per pool, while `RoomPolicy` says there is room (KV above the
                            interactive reserve, nobody interactive waiting, few bulk while
                            people are served): `ReleaseOrder` picks the batch (at risk first,
                            fair across teams in tokens, earliest deadline within a team) and
                            its next entry goes to the gateway as class `bulk`
    flush (every results_flush_s)  results written and marked once; complete chunks acked;
                            a batch whose last entry ended is finalized

The decisions are the plain policy objects of `bulk.release_policy`; this class does the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import redis.asyncio as aioredis

from bulk.batch_lines import BatchEntry, LineValidator, custom_id_of
from bulk.batch_store import BatchRecord, BatchStatus, BatchStore
from bulk.batch_work import BatchWork, ReadyEntry
from bulk.blob_store import BlobStore
from bulk.chunk_queue import ChunkQueue, QueuedChunk
from bulk.file_store import FileStore
from bulk.finalizer import Finalizer
from bulk.gateway_client import Submission, Verdict
from bulk.ingest import split_lines
from bulk.intake import make_validator
from bulk.metrics import DispatcherMetrics
from bulk.pool_loads import PoolLoadSource
from bulk.release_policy import Candidate, DeadlineRisk, ReleaseOrder, RoomPolicy
from bulk.results import EntryResult, Outcome, ResultStore, output_record
from bulk.retention import Retention, RetentionPolicy
from config.replica_acks import ReplicaAcks
from config.settings import SwitchyardConfig
from contracts.catalog import ModelCatalog
from contracts.openai_wire.chat_template import ChatTemplates
from quota.lease_size import bulk_lease_tokens

logger = logging.getLogger(__name__)

_FLUSH_AT_RESULTS = 256
_SWEEP_BUDGET_S = 0.2  # per step, for expiring or cancelling a batch's remaining entries
_SWEEP_ERRORS = {
    Outcome.EXPIRED: {"code": "batch_expired", "message": "the batch reached its deadline before this request ran"},
    Outcome.FAILED: {"code": "batch_cancelled", "message": "the batch was cancelled before this request ran"},
}
_STOP_GRACE_S = 10.0  # on SIGTERM, how long running entries may take to end (then: reclaimed later)


class Submitter(Protocol):
    async def submit(self, team_id: str, batch_id: str, entry: BatchEntry, attempt: int) -> Submission: ...


class Dispatcher:
    def __init__(
        self,
        config: SwitchyardConfig,
        client: aioredis.Redis,
        blobs: BlobStore,
        catalog: ModelCatalog,
        submitter: Submitter,
        loads: PoolLoadSource,
        *,
        consumer: str,
        clock: Callable[[], float] = time.time,
        refresh_s: float = 1.0,
        metrics: DispatcherMetrics | None = None,
    ) -> None:
        """`refresh_s`: how often batches are re-read from Redis (a cancel or a new batch is
        seen within it)."""
        self._config = config
        self._bulk = config.bulk
        self._blobs = blobs
        self._catalog = catalog
        self._templates = ChatTemplates(config)
        self._submitter = submitter
        self._loads = loads
        self._clock = clock
        self._refresh_s = refresh_s
        self.metrics = metrics if metrics is not None else DispatcherMetrics()
        self.batches = BatchStore(client)
        self.queue = ChunkQueue(client, consumer)
        self.results = ResultStore(client, blobs, ReplicaAcks.from_settings(config.redis))
        files = FileStore(client)
        policy = RetentionPolicy.from_spec(self._bulk)
        self.retention = Retention(client, blobs, files, self.batches, policy, clock=clock)
        self._finalizer = Finalizer(client, blobs, self.batches, self.results, files, self.queue, self.retention)
        self._room = RoomPolicy(
            self._bulk.interactive_reserve_fraction,
            self._bulk.max_inflight_per_pool,
            self._bulk.max_inflight_beside_interactive,
        )
        weights = {team: spec.weight for team, spec in config.teams.items()}
        self._orders = {pool_id: ReleaseOrder(weights) for pool_id in config.pools}  # fairness per pool
        self._risk = DeadlineRisk()
        self._work: dict[str, BatchWork] = {}
        # No room for a while: (pool, None) when the pool is full (503), (pool, team) when the
        # team is at its share or a limit (429), so one team's daily limit holds no one else.
        self._paused_until: dict[tuple[str, str | None], float] = {}
        self._segments = 0
        self._next_refresh = 0.0
        self._next_keepalive = 0.0
        self._next_flush = 0.0
        self._wake = asyncio.Event()

    async def run(self, stop: asyncio.Event, tick_s: float = 0.05) -> None:
        """Step until `stop` is set; then let running entries end and write their results."""
        while not stop.is_set():
            try:
                await self.step()
            except Exception:  # Redis or the blob store failing must not end the service
                logger.exception("dispatcher step failed; retrying")
                await asyncio.sleep(1.0)
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):  # TimeoutError only from 3.11
                await asyncio.wait_for(self._wake.wait(), tick_s)
        tasks = [task for work in self._work.values() for task in work.inflight.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=_STOP_GRACE_S)
        await self.flush(self._clock())

    async def step(self) -> None:
        now = self._clock()
        if now >= self._next_refresh:
            self._next_refresh = now + self._refresh_s
            await self._refresh(now)
        for work in [w for w in self._work.values() if w.sweep is not None]:
            await self._sweep(work, now)
        await self._release(now)
        if now >= self._next_flush or any(len(w.results) >= _FLUSH_AT_RESULTS for w in self._work.values()):
            self._next_flush = now + self._bulk.results_flush_s
            await self.flush(now)

    def inflight(self) -> int:
        return sum(len(work.inflight) for work in self._work.values())

    # -- refresh ---------------------------------------------------------------------------

    async def _refresh(self, now: float) -> None:
        active = await self.batches.active_ids()
        for batch_id in set(self._work) - set(active):
            self._drop(batch_id)
        for batch_id in active:
            try:
                await self._refresh_batch(batch_id, now)
            except Exception:  # one broken batch (its model gone from the config, say) holds no other
                logger.exception("batch refresh failed", extra={"batch_id": batch_id})
        self._observe_backlog()
        if now >= self._next_keepalive:
            self._next_keepalive = now + self._bulk.reclaim_idle_s / 3
            await self._keep_chunks()

    async def _refresh_batch(self, batch_id: str, now: float) -> None:
        record = await self.batches.get(batch_id)
        if record is None:
            return
        if record.status is BatchStatus.FINALIZING:
            await self._finalize(batch_id, now)
            return
        work = self._work.get(batch_id)
        if work is None:
            work = self._work[batch_id] = BatchWork(record, self._validator(record))
        work.record = record
        work.queue_empty = False
        if now >= record.deadline:
            work.sweep = Outcome.EXPIRED
        elif record.status is BatchStatus.CANCELLING:
            work.sweep = work.sweep or Outcome.FAILED
        else:
            await self._flag_risk(work, now)

    def _observe_backlog(self) -> None:
        pending: dict[str, int] = dict.fromkeys(self._config.teams, 0)
        at_risk: dict[str, int] = dict.fromkeys(self._config.teams, 0)
        for work in self._work.values():
            team = work.record.team_id
            pending[team] = pending.get(team, 0) + work.record.pending
            at_risk[team] = at_risk.get(team, 0) + int(work.record.at_risk)
        for team, count in pending.items():
            self.metrics.pending.labels(team).set(count)
            self.metrics.at_risk.labels(team).set(at_risk[team])

    async def _flag_risk(self, work: BatchWork, now: float) -> None:
        record = work.record
        work.rate.observe(record.finished_entries - record.invalid, now)
        at_risk = self._risk.at_risk(record.pending, work.rate.per_s(), now, record.deadline)
        if at_risk != record.at_risk:
            await self.batches.set_fields(record.batch_id, at_risk=int(at_risk))
            if at_risk:
                logger.warning(
                    "batch at risk of missing its deadline; raised within bulk",
                    extra={"batch_id": record.batch_id, "team": record.team_id, "pending": record.pending},
                )

    async def _keep_chunks(self) -> None:
        """Refresh the chunks this dispatcher holds; take over those a dead one held."""
        for work in list(self._work.values()):
            await self.queue.touch(work.batch_id, work.held_message_ids())
            if work.record.status is BatchStatus.IN_PROGRESS:
                for queued in await self.queue.reclaim(work.batch_id, self._bulk.reclaim_idle_s):
                    if queued.message_id not in work.chunks:
                        logger.info("reclaimed a chunk", extra={"batch_id": work.batch_id, "chunk": queued.message_id})
                        await self._load(work, queued)

    async def _sweep(self, work: BatchWork, now: float) -> None:
        """Expire (deadline) or cancel the batch's entries not yet ended, for at most
        `_SWEEP_BUDGET_S` per call (a batch of 50,000 takes a few calls; releases go on
        between them). Expiry stops running entries; cancellation lets them finish."""
        outcome = work.sweep
        assert outcome is not None
        if outcome is Outcome.EXPIRED and work.inflight:
            for task in work.inflight.values():
                task.cancel()
            await asyncio.gather(*work.inflight.values(), return_exceptions=True)
        work.ready.clear()
        error = _SWEEP_ERRORS[outcome]
        pending = {result.line for result in work.results} | set(work.inflight)
        foreign: list[str] = []
        began = time.monotonic()
        left = await self.queue.drain(work.batch_id)
        for queued in left:
            if time.monotonic() - began > _SWEEP_BUDGET_S:
                break
            chunk = queued.chunk
            skip = pending | set(chunk.invalid_lines)  # refused lines are in the errors file already
            raw = await self._blobs.read_range(work.record.input_key, chunk.byte_start, chunk.byte_end)
            lines = [(n, text) for n, text in split_lines(raw, chunk.first_line) if n not in skip]
            marked = await self.results.marked(work.batch_id, [n for n, _ in lines])
            for line, text in lines:
                if line not in marked:
                    record = output_record(work.batch_id, line, custom_id_of(text), error=error)
                    work.results.append(EntryResult(line, outcome, record))
            if queued.message_id not in work.chunks:
                foreign.append(queued.message_id)
        await self._write(work, now)
        for message_id in foreign:  # another dispatcher's (or nobody's) chunk: every line is marked now
            await self.queue.ack(work.batch_id, message_id)
        if await self.results.settle(work.batch_id, now):
            await self._finalize(work.batch_id, now)
        elif not left and not work.inflight:
            await self._sweep_orphans(work, error, outcome, now)

    async def _sweep_orphans(self, work: BatchWork, error: dict[str, str], outcome: Outcome, now: float) -> None:
        """No chunk is left and the batch has not ended: some line's chunk was acknowledged
        without its mark (a mark a failover dropped). Those lines are found from the input
        itself and ended like the rest, so a batch always reaches a final status."""
        raw = b"".join([block async for block in self._blobs.read(work.record.input_key)])
        lines = list(split_lines(raw, 1))
        marked = await self.results.marked(work.batch_id, [n for n, _ in lines])
        orphans = [(n, text) for n, text in lines if n not in marked]
        if not orphans:
            return
        logger.warning(
            "batch entries with no chunk and no result: ended by the sweep",
            extra={"batch_id": work.batch_id, "entries": len(orphans), "first_line": orphans[0][0]},
        )
        for line, text in orphans:
            work.results.append(
                EntryResult(line, outcome, output_record(work.batch_id, line, custom_id_of(text), error=error))
            )
        await self._write(work, now)

    # -- release ---------------------------------------------------------------------------

    async def _release(self, now: float) -> None:
        by_pool: dict[str, list[BatchWork]] = {}
        for work in self._work.values():
            if work.record.status is BatchStatus.IN_PROGRESS and now < work.record.deadline:
                by_pool.setdefault(self._pool_of(work.record), []).append(work)
        for pool_id, works in by_pool.items():
            await self._release_in_pool(pool_id, works)

    def _lease(self, cost_tokens: int) -> int:
        """What an entry of `cost_tokens` (prompt bound + max_tokens) leases at the gateway."""
        return bulk_lease_tokens(cost_tokens, self._bulk.lease_fraction)

    def _paused(self, pool_id: str, team_id: str | None) -> bool:
        return self._paused_until.get((pool_id, team_id), 0.0) > self._clock()

    async def _release_in_pool(self, pool_id: str, works: list[BatchWork]) -> None:
        if self._paused(pool_id, None):
            return
        for work in works:
            await self._fill(work)
        if not any(work.ready for work in works):
            return
        tokens = sum(cost for work in works for cost in work.inflight_costs.values())
        requests = sum(len(work.inflight) for work in works)
        load = self._room.note(await self._loads.pool_load(pool_id, tokens, requests), self._clock())
        room = self._room.budget(load)
        self.metrics.room_tokens.labels(pool_id).set(room.tokens)
        while room.open and not self._paused(pool_id, None):
            # Every batch with an entry ready is a candidate, fitting or not: the order resets
            # the credit of teams left out, and a team of long entries must build it up. A team
            # held back by a 429 sits out until its Retry-After.
            candidates = [
                Candidate(
                    w.batch_id,
                    w.record.team_id,
                    w.record.deadline,
                    w.record.created_at,
                    self._lease(cost),
                    w.record.at_risk,
                )
                for w in works
                if (cost := w.head_cost()) is not None and not self._paused(pool_id, w.record.team_id)
            ]
            chosen = self._orders[pool_id].peek(candidates)
            if chosen is None or not room.allows(chosen.head_cost):
                break
            self._orders[pool_id].pick(candidates)
            work = self._work[chosen.batch_id]
            if work.record.started_at is None:
                work.record = replace(work.record, started_at=self._clock())
                await self.batches.mark_started(work.batch_id, self._clock())
            ready = work.ready.popleft()
            room.spend(self._launch(work, ready))
            self.metrics.released.labels(pool_id, work.record.team_id).inc()
            await self._fill(work)

    async def _fill(self, work: BatchWork) -> None:
        """Make sure the batch has an entry ready, reading its next chunk if needed."""
        while not work.ready and not work.queue_empty:
            chunks = await self.queue.read(work.batch_id)
            if not chunks:
                work.queue_empty = True
                return
            await self._load(work, chunks[0])

    async def _load(self, work: BatchWork, queued: QueuedChunk) -> None:
        chunk = queued.chunk
        raw = await self._blobs.read_range(work.record.input_key, chunk.byte_start, chunk.byte_end)
        marked = await self.results.marked(work.batch_id, list(range(chunk.first_line, chunk.last_line + 1)))
        if not work.load_chunk(queued, raw, marked):
            await self.queue.ack(work.batch_id, queued.message_id)

    def _launch(self, work: BatchWork, ready: ReadyEntry) -> int:
        """Run the entry; the tokens it leases, as counted in flight."""
        line = ready.entry.line
        self.metrics.inflight.labels(self._pool_of(work.record)).inc()
        work.inflight[line] = asyncio.create_task(self._run_entry(work, ready), name=f"bulk-{work.batch_id}-{line}")
        lease = work.inflight_costs[line] = self._lease(ready.entry.cost_tokens)
        return lease

    async def _run_entry(self, work: BatchWork, ready: ReadyEntry) -> None:
        entry = ready.entry
        try:
            try:
                submission = await self._submitter.submit(work.record.team_id, work.batch_id, entry, ready.attempt)
            except Exception as exc:  # the entry cannot even be sent: it fails, it never vanishes
                logger.exception("bulk entry could not be sent", extra={"batch_id": work.batch_id, "line": entry.line})
                reason = f"the entry could not be sent: {type(exc).__name__}: {exc}"
                error = {"code": "invalid_request", "message": reason}
                submission = Submission(Verdict.FAILED, "", error=error)
            self._settle_entry(work, ready, submission)
        finally:
            work.inflight.pop(entry.line, None)
            work.inflight_costs.pop(entry.line, None)
            self.metrics.inflight.labels(self._pool_of(work.record)).dec()
            self._wake.set()

    def _settle_entry(self, work: BatchWork, ready: ReadyEntry, submission: Submission) -> None:
        entry = ready.entry
        verdict = submission.verdict
        if verdict is Verdict.LATER:  # no room after all: not an attempt
            work.ready.appendleft(ready)
            pool_id = self._pool_of(work.record)
            team_id = work.record.team_id if (submission.error or {}).get("status_code") == 429 else None
            self._paused_until[(pool_id, team_id)] = self._clock() + submission.retry_after_s
            self.metrics.deferred.labels(pool_id).inc()
            return
        if verdict is Verdict.RETRY and ready.attempt + 1 < self._bulk.max_attempts:
            logger.info(
                "bulk entry failed on a server; retrying", extra={"batch_id": work.batch_id, "line": entry.line}
            )
            work.ready.appendleft(ReadyEntry(entry, ready.attempt + 1))
            return
        if verdict is Verdict.DONE:
            record = output_record(work.batch_id, entry.line, entry.custom_id, response=submission.response)
            work.results.append(EntryResult(entry.line, Outcome.DONE, record))
            return
        error = dict(submission.error or {"code": "server_error", "message": "unknown failure"})
        if verdict is Verdict.RETRY:
            error["message"] = f"failed after {ready.attempt + 1} attempts: {error.get('message')}"
        record = output_record(work.batch_id, entry.line, entry.custom_id, error=error)
        work.results.append(EntryResult(entry.line, Outcome.FAILED, record))

    # -- flush -----------------------------------------------------------------------------

    async def flush(self, now: float) -> None:
        for work in list(self._work.values()):
            if work.results:
                await self._write(work, now)

    async def _write(self, work: BatchWork, now: float) -> None:
        if not work.results:
            return
        results, work.results = work.results, []
        self._segments += 1
        try:
            marked = await self.results.write(work.batch_id, f"{self.queue.consumer}-{self._segments}", results, now)
        except Exception:
            work.results[:0] = results  # written next time; nothing was marked
            raise
        for result in results:
            if result.line in marked.lines:
                self.metrics.entries.labels(work.record.team_id, result.outcome.value).inc()
        for message_id in work.settle(result.line for result in results):
            await self.queue.ack(work.batch_id, message_id)
        if marked.finalizing:
            await self._finalize(work.batch_id, now)

    async def _finalize(self, batch_id: str, now: float) -> None:
        # Results this dispatcher still holds for the batch are duplicates: every entry is marked.
        if await self._finalizer.finalize(batch_id, now) is not None:
            self._drop(batch_id)

    # -- helpers ---------------------------------------------------------------------------

    def _drop(self, batch_id: str) -> None:
        work = self._work.pop(batch_id, None)
        if work is not None:
            for task in work.inflight.values():
                task.cancel()

    def _pool_of(self, record: BatchRecord) -> str:
        return self._config.pools_for_model(record.model_id)[0]

    def _validator(self, record: BatchRecord) -> LineValidator:
        return make_validator(self._catalog, self._templates, record.model_id, record.line_format, record.endpoint)
