"""One accepted request's life around its generation, once `GenerationService.start()` (in
`serving/generation.py`) has decided it runs: its lease and its claim kept alive, its deltas
mirrored to Redis for other gateway processes that follow it, and at its end its final record,
its lease's release and its usage.

    start ──▶ keep_lease_alive(): the lease and the claim on the id renewed with every other
              this process holds, one batch every third of their TTLs
      │
    deltas ─▶ on_delta(): nothing but the first delta's stamp (this process's readers read memory)
      │       followed(): another process reads it (a repeat, a DELETE there): its end goes to
      │                   the deltas stream; with `mirror`, its deltas too, every
      │                   MIRROR_INTERVAL_S, from the first
      │
    finish ─▶ on_finish(), each step retried while Redis is away, a failure logged:
                the final record, kept keep_s for repeats (or the id freed: failed before a token)
                the lease released
                usage metered (serving/metering.py → quota/usage_formula.py, quota/usage.py)
              and one "generation ended" log line
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from contracts.generation import GRAMMAR_FAILED, GenerationDelta
from contracts.latency_log import LatencyLog
from quota.admission import Admission
from quota.leases import Lease
from serving.delta_records import delta_record, logprobs_record
from serving.idempotency import IdempotencyStore
from serving.metering import Metering, request_usage
from serving.redis_retry import until_reachable
from serving.requests_registry import InflightRequest

logger = logging.getLogger(__name__)

# A request another process follows is mirrored to Redis at most this often: a few writes a
# second, whatever the reply's pace.
MIRROR_INTERVAL_S = 0.25


@dataclass(slots=True)
class LatencyStamps:
    """One request's wall-clock stamps in this gateway, written to the latency log at its end:
    `started` (the route took the checked body), `admitted` (its lease granted), then the first
    delta with tokens and the end as the backend reported them."""

    log: LatencyLog
    started: float
    admitted: float
    first_delta: float | None = None

    def write(self, request_id: str) -> None:
        marks = {
            "started": self.started,
            "admitted": self.admitted,
            "first_delta": self.first_delta,
            "finished": time.time(),
        }
        self.log.write("gateway", request_id, marks)


class RequestLifecycle:
    """One accepted request's bookkeeping (the registry's `GenerationHooks`): its lease and
    claim kept alive, its deltas mirrored to followers, its record for repeats, its usage."""

    def __init__(
        self,
        idempotency: IdempotencyStore,
        admission: Admission,
        metering: Metering,
        team_id: str,
        public_id: str,
        request_class: str,
        lease: Lease,
        *,
        keep_s: int | None,
        door: str = "http",
        stamps: LatencyStamps | None = None,
        billed_before: int = 0,
    ) -> None:
        """`billed_before`: tokens of this reply that an earlier generation of its id billed
        (a resumed generation: the stored tokens it carries, when they reached a caller)."""
        self._billed_before = billed_before
        self._idempotency = idempotency
        self._stamps = stamps
        self._door = door
        self._admission = admission
        self._metering = metering
        self._team_id = team_id
        self._public_id = public_id
        self._request_class = request_class
        self._lease = lease
        self._renewer: asyncio.Task[None] | None = None
        self._keep_s = keep_s  # how long the result is kept for repeats (None: not at all)
        self._followed = False  # another process reads this request: end its stream
        self._mirror: asyncio.Task[None] | None = None

    def keep_lease_alive(self, entry: InflightRequest) -> None:
        """Renew the lease and the claim on the id until `entry` ends (call once it started)."""
        self._renewer = asyncio.create_task(self._renew(entry))

    async def _renew(self, entry: InflightRequest) -> None:
        """The lease and the claim on the id stay this process's while it generates, each
        renewed with all the others this process holds (`Admission.renewing`,
        `IdempotencyStore.owning`): no Redis call of its own, however long it runs."""
        async with self._admission.renewing(self._lease), self._idempotency.owning(self._team_id, self._public_id):
            await entry.wait_done()

    async def on_delta(self, entry: InflightRequest, delta: GenerationDelta) -> None:
        """Nothing per delta but a stamp of the first (when stamping): this process's readers
        read memory; followers elsewhere are mirrored on their own schedule (`followed`)."""
        stamps = self._stamps
        if stamps is not None and stamps.first_delta is None and delta.token_ids:
            stamps.first_delta = time.time()

    def followed(self, entry: InflightRequest, *, mirror: bool) -> None:
        """Another process reads this request: its end goes to the deltas stream, and with
        `mirror` its deltas too, from the first (once, whoever else attaches later)."""
        self._followed = True
        if mirror and self._mirror is None and not entry.done:
            self._mirror = asyncio.create_task(self._mirror_deltas(entry))

    async def _mirror_deltas(self, entry: InflightRequest) -> None:
        """Mirror the deltas until the end. A write that fails stops it: sent again it might
        land twice (a timeout after Redis ran it), and the final entry carries every delta the
        followers lack anyway."""
        mirrored = 0
        while not entry.done:
            if len(entry.deltas) > mirrored:
                batch, mirrored = entry.deltas[mirrored:], len(entry.deltas)
                try:
                    await self._idempotency.mirror(self._team_id, self._public_id, batch)
                except redis.RedisError as exc:
                    logger.warning("mirroring request %s stopped (%s): its followers get the rest at its end",
                                   self._public_id, exc)  # fmt: skip
                    return
                await asyncio.sleep(MIRROR_INTERVAL_S)
            await entry.wait_changed(mirrored)

    async def on_finish(self, entry: InflightRequest) -> None:
        """The request ended, however it ended: stop renewing and mirroring, then write its
        final record, release its lease and meter its usage, side by side."""
        if self._stamps is not None:
            self._stamps.write(entry.request_id)
        if self._renewer is not None:
            self._renewer.cancel()
        if self._mirror is not None:
            self._mirror.cancel()  # the final entry carries every delta the followers lack
        ended = time.monotonic()
        # The bill is what reached the caller: a whole reply that failed reached no one, unless
        # a stream read it as it came, here or in another process (a repeat that attached). A
        # reply its grammar gave up on reached no one as a product, streamed or not.
        grammar_failed = entry.stop_reason == GRAMMAR_FAILED
        delivered = not grammar_failed and (entry.error is None or entry.streamed or self._followed)
        # Its record replays that end (a repeat of its id gets the same 400), never resumed: the
        # grammar would give up again.
        failure = None if grammar_failed else entry.error
        result: dict[str, Any] = {
            "stop_reason": entry.stop_reason or ("error" if entry.error else "aborted"),
            "usage": entry.usage.as_dict(),
            "error": str(failure) if failure is not None else None,
            "deltas": [delta_record(delta) for delta in entry.deltas],
            "seed": entry.request.seed,  # what a generation resuming it draws from
            # The prompt's log-probabilities (echo), sent once by the first server: a resumed
            # generation's server does not send them again.
            "prompt_logprobs": None if entry.prompt_logprobs is None else logprobs_record(entry.prompt_logprobs),
            # What of the reply's tokens is on the bill: a generation that resumes it bills the rest.
            "billed_tokens": entry.usage.completion_tokens if delivered else self._billed_before,
        }
        team, public_id = self._team_id, self._public_id
        # Failed after some tokens (every server it could move to failed): a retry of its id
        # resumes it where it stopped, rather than replaying the failure or generating anew.
        resumable = failure is not None and bool(entry.deltas) and not entry.cancel_requested

        async def end_record() -> None:
            # A failure before any token (a backend 503, say) frees the id, so the retry its
            # Retry-After invites can run; anything else is the request's one result.
            if entry.error is not None and not entry.deltas:
                await self._idempotency.forget(team, public_id)
            else:
                await self._idempotency.record_final(
                    team, public_id, result, keep_s=self._keep_s, followed=self._followed, resumable=resumable
                )

        usage = request_usage(
            entry,
            team_id=self._team_id,
            request_class=self._request_class,
            record_id=self._lease.lease_id,  # one lease per generation: a resent record counts once
            ended_at=ended,
            delivered=delivered,
            billed_before=self._billed_before,
        )
        steps = (
            until_reachable(end_record, what="the request's final record"),
            until_reachable(lambda: self._admission.release(self._lease), what="the lease's release"),
            self._metering.record(usage, at=datetime.now(UTC), door=self._door),
        )
        for outcome in await asyncio.gather(*steps, return_exceptions=True):
            if isinstance(outcome, BaseException):
                logger.error("finishing request %s failed", entry.request_id, exc_info=outcome)
        first = entry.first_token_at
        logger.info(
            "generation ended",
            extra={
                "request_id": self._public_id,
                "team": self._team_id,
                "model": entry.request.model_id,
                "request_class": self._request_class,
                "door": self._door,
                "status": result["stop_reason"],
                "borrowed": self._lease.borrowed,
                "delivered": delivered,
                "resumed_tokens": entry.carried_tokens,
                "duration_s": round(ended - entry.started_at, 4),
                "ttft_s": None if first is None else round(first - entry.started_at, 4),
                **entry.usage.as_dict(),
            },
        )
