"""One process's script calls, coalesced: many callers' writes in one pipeline.

A gateway worker with thousands of streams open ends hundreds of them a second, and each end
is three scripts (the final record, the lease's release, the usage record); a flood of new
requests is a claim and a reservation each. Sent one by one, each takes a pooled connection
and a round trip, and past a few hundred at once the pool runs dry (`No connection
available`, then every caller retrying at once). Here the calls queue, and a sender takes
whatever is queued into one pipeline on one connection:

    run() ──▶ queue ──▶ sender: EVALSHA a  EVALSHA b ... [WAIT replicas timeout]  ─▶ replies
                        (at most `max_batch` calls; at most `senders` pipelines in flight)

Nothing waits to fill a batch: an idle process sends a call at once, alone; under load the
calls that queued while a pipeline was in flight go together in the next. So a worker uses at
most `senders` connections for its scripts, whatever it has in flight, and one WAIT covers a
whole batch in sentinel mode (`ReplicaAcks`, config/replica_acks.py): a batch no replica
acknowledged fails every call in it with `NotReplicated` ("retry", config/redis_errors.py).

Each call's reply or error is its own: a script that fails fails its caller alone; a
connection lost mid-batch fails every call in it with that error (each caller decides whether
to try again: the end-of-request writes are safe to send twice, serving/redis_retry.py). A
server that does not know a script yet (a new primary) is sent it, and only the calls it
refused are sent again.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from config.replica_acks import ReplicaAcks

# Calls per pipeline: bounds one batch's time on Redis (scripts here run in microseconds).
MAX_BATCH = 128
# Pipelines in flight per client: a second one sends while the first waits on its replies.
SENDERS = 2


@dataclass(slots=True)
class _Call:
    script: AsyncScript
    words: list[Any]  # keys then args
    numkeys: int
    reply: asyncio.Future[Any]


class BatchedScripts:
    """A `ScriptRunner` (config/script_runner.py) that sends concurrent calls together.
    One per process and event loop; it may serve several clients (one queue each)."""

    def __init__(self, acks: ReplicaAcks | None = None, *, max_batch: int = MAX_BATCH, senders: int = SENDERS) -> None:
        if max_batch < 1 or senders < 1:
            raise ValueError(f"max_batch and senders must be >= 1, got {max_batch} and {senders}")
        self.acks = acks if acks is not None else ReplicaAcks(0, 1)
        self._max_batch = max_batch
        self._senders = senders
        self._queues: dict[int, collections.deque[_Call]] = {}
        self._running: dict[int, set[asyncio.Task[None]]] = {}
        self.batches = 0  # pipelines sent (for tests and the bench)
        self.calls = 0  # calls sent in them

    async def run(self, client: aioredis.Redis, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """`script`'s reply, sent with whatever other calls are queued for `client`."""
        call = _Call(script, [*keys, *args], len(keys), asyncio.get_running_loop().create_future())
        queue = self._queues.setdefault(id(client), collections.deque())
        queue.append(call)
        running = self._running.setdefault(id(client), set())
        if len(running) < self._senders:
            running.add(asyncio.create_task(self._send_queued(client, queue, running), name="batched-scripts"))
        return await call.reply

    async def _send_queued(
        self, client: aioredis.Redis, queue: collections.deque[_Call], running: set[asyncio.Task[None]]
    ) -> None:
        """Send batches until the queue is empty, then leave `running` before any other call
        can be queued unseen (no await between the last look at the queue and the leaving)."""
        try:
            while queue:
                batch = [queue.popleft() for _ in range(min(len(queue), self._max_batch))]
                try:
                    await self._send(client, batch)
                except asyncio.CancelledError:
                    for call in batch:
                        call.reply.cancel()
                    raise
                except Exception as exc:
                    for call in batch:
                        if not call.reply.done():
                            call.reply.set_exception(exc)
        finally:
            running.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def _send(self, client: aioredis.Redis, batch: list[_Call]) -> None:
        """One pipeline for `batch` (and, when a script was unknown, one more for the calls
        the server refused)."""
        todo = batch
        for attempt in range(2):
            wait = self.acks.waiting()
            async with client.pipeline(transaction=False) as pipe:
                for call in todo:
                    pipe.evalsha(call.script.sha, call.numkeys, *call.words)
                if wait:
                    pipe.wait(self.acks.replicas, self.acks.timeout_ms)
                replies = await pipe.execute(raise_on_error=False)
            self.batches += 1
            self.calls += len(todo)
            if wait:
                acked = replies.pop()
                if isinstance(acked, Exception):
                    raise acked
                self.acks.acknowledged(int(acked))
            unknown = [call for call, reply in zip(todo, replies, strict=True) if isinstance(reply, NoScriptError)]
            for call, reply in zip(todo, replies, strict=True):
                if call.reply.done() or (attempt == 0 and isinstance(reply, NoScriptError)):
                    continue
                if isinstance(reply, Exception):
                    call.reply.set_exception(reply)
                else:
                    call.reply.set_result(reply)
            if not unknown:
                return
            for script in {id(call.script): call.script for call in unknown}.values():
                await client.script_load(script.script)
            todo = unknown
