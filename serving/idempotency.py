"""A caller-made `request_id` names one generation, never two, across every gateway process.

Redis holds, per team and request id:

    sy:req:{team}:{id}          hash   fingerprint, state (running|done), result (JSON, with
                                       every delta of the reply), kept once done for the
                                       idempotency window (24 h by default; bulk's 10 min)
    sy:req-deltas:{team}:{id}   stream only while another process follows the request: its
                                       deltas so far, then coalesced batches, then one `final`
                                       entry; gone a minute after the end

    claim()  ──NEW──────▶ this process generates; record_final() at the end
             ──RUNNING──▶ attach: ask the owner (the request bus) to mirror its deltas, then
                          read the deltas stream from the start and follow it live
             ──DONE─────▶ the stored result (its deltas replay the same events)
             ──RESUME───▶ the stored result of a generation that failed after some tokens
                          (every server it could move to failed): this process takes the id
                          over and resumes it where it stopped, the stored tokens replayed
                          to the engine as the failover does (`resume_token_ids`), so the id
                          still names one reply, never two, and a retry completes it
             ──CONFLICT─▶ 409: the same id with a different body

What it costs Redis does not grow with the reply: a request nobody follows from another
process writes nothing per delta (its readers in the owning process read memory), so one claim
and one final write per request, whatever its length. A request without a caller-made id
keeps nothing after its end (`keep_s=None`): no one can ask for it again. Bulk's results
are kept briefly (gateway.bulk_result_ttl_s): the dispatcher writes the results file from the
reply itself and retries an entry under a new id, so a day of them would only fill Redis.

In sentinel mode the claim and the end are held by a replica before they count
(`ReplicaAcks`, config/replica_acks.py): a failover right after cannot forget that an id was
claimed or ended, and so cannot let a repeat generate it again.

The claim is one Lua script, so two gateways that receive the same id at the same moment
cannot both generate. Its owner renews `sy:req-owner:{team}:{id}` while it generates (every
`owner_ttl_s` / 3): a generation whose owner died (a gateway worker SIGKILLed) can be claimed
again once that key lapses, so a retry with the same id gets exactly one generation (before,
its record stayed `running` for the idempotency window and every retry failed: the chaos
run's kill-gateway-worker fault). Attaching readers still give up after
`attach_idle_timeout_s` without a new entry and report a retryable failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from config.replica_acks import ReplicaAcks
from config.script_runner import ScriptRunner
from contracts.generation import GenerationDelta, Logprobs
from serving.delta_records import delta_from_record, delta_record

logger = logging.getLogger(__name__)

RESULT_TTL_S = 24 * 3600
# How long a finished request's deltas stream stays for followers still reading it.
FOLLOW_GRACE_S = 60

# How long a running claim outlives its owner's last renewal: a gateway process that died
# mid-generation leaves its ids to be claimed again after this.
OWNER_TTL_S = 15.0
# Owner keys renewed per pipeline: bounds how long one renewal holds Redis.
_RENEW_BATCH = 500

# KEYS[1] record  KEYS[2] owner  KEYS[3] deltas  ARGV[1] fingerprint  ARGV[2] ttl_s  ARGV[3] owner ttl (ms)
_CLAIM = """
local existing = redis.call('HGET', KEYS[1], 'fingerprint')
if not existing then
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'state', 'running', 'owned', '1')
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
  return {'new', ''}
end
if existing ~= ARGV[1] then
  return {'conflict', ''}
end
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'done' then
  local result = redis.call('HGET', KEYS[1], 'result') or ''
  if redis.call('HGET', KEYS[1], 'resumable') == '1' then
    -- failed after some tokens: this claim resumes it (one claim only: it is running again)
    redis.call('HSET', KEYS[1], 'state', 'running', 'owned', '1')
    redis.call('HDEL', KEYS[1], 'resumable')
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    redis.call('DEL', KEYS[3])
    redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
    return {'resume', result}
  end
  return {'done', result}
end
if redis.call('HEXISTS', KEYS[1], 'owned') == 1 and redis.call('EXISTS', KEYS[2]) == 0 then
  -- running, but its owner stopped renewing (its process died): this claim takes it over,
  -- without the dead owner's partial deltas (a record of a gateway from before owners were
  -- renewed has no 'owned': never taken over, so a rolling upgrade cannot run an id twice)
  redis.call('DEL', KEYS[3])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
  local failed = redis.call('HGET', KEYS[1], 'result')
  if failed then
    return {'resume', failed}  -- it was resuming a failed generation: resume that again
  end
  return {'new', ''}
end
return {'running', ''}
"""


# KEYS[1] record  KEYS[2] owner  KEYS[3] deltas  ARGV[1] result (JSON)  ARGV[2] keep_s ('': drop
# the record)  ARGV[3] '1' when followed  ARGV[4] the followers' grace (s)  ARGV[5] '1': resumable
_FINAL = """
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'state', 'done', 'result', ARGV[1])
  if ARGV[5] == '1' then
    redis.call('HSET', KEYS[1], 'resumable', '1')
  else
    redis.call('HDEL', KEYS[1], 'resumable')
  end
  redis.call('EXPIRE', KEYS[1], ARGV[2])
else
  redis.call('DEL', KEYS[1])
end
redis.call('DEL', KEYS[2])
if ARGV[3] == '1' then
  redis.call('XADD', KEYS[3], '*', 'final', ARGV[1])
  redis.call('EXPIRE', KEYS[3], ARGV[4])
end
return 1
"""


class ClaimState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    DONE = "done"
    RESUME = "resume"
    CONFLICT = "conflict"


@dataclass(frozen=True, slots=True)
class Claim:
    state: ClaimState
    result: dict[str, Any] | None = None  # the stored final result when DONE or RESUME


@dataclass(frozen=True, slots=True)
class StoredDelta:
    """One entry of a request's deltas stream: text and tokens (with their log-probabilities
    when the request asked), or the final result."""

    text: str = ""
    token_ids: tuple[int, ...] = ()
    final: dict[str, Any] | None = None
    logprobs: Logprobs | None = None


def fingerprint(body: dict[str, Any]) -> str:
    """A stable digest of what was asked: the same id with another body is a conflict."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class RecordGone(LookupError):
    """The request ended and left no record to read (it had no caller-made id)."""


class IdempotencyStore:
    """Claims, records and replays generations by (team, request id)."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        ttl_s: int = RESULT_TTL_S,
        follow_grace_s: int = FOLLOW_GRACE_S,
        owner_ttl_s: float = OWNER_TTL_S,
        acks: ScriptRunner | None = None,
        blocking: aioredis.Redis | None = None,
    ) -> None:
        """`blocking`: the client `follow`'s XREADs wait on (a second of each read's connection
        held), kept apart from `client`'s short commands so followers never take the
        connections every request's claim needs; default `client`."""
        self._redis = client
        self._blocking = blocking if blocking is not None else client
        self._acks: ScriptRunner = acks if acks is not None else ReplicaAcks(0, 1)
        self._ttl_s = ttl_s
        self.owner_ttl_s = owner_ttl_s
        self._follow_grace_s = follow_grace_s
        self._claim = client.register_script(_CLAIM)
        self._final = client.register_script(_FINAL)
        self._owned: dict[str, int] = {}  # owner key -> generations holding it (`owning`)
        self._owner_keeper: asyncio.Task[None] | None = None
        # `follow` blocks on XREAD in slices shorter than the client's socket timeout (2 s in
        # the gateway), which would otherwise cut a longer wait short with a redis TimeoutError.
        socket_timeout = self._blocking.connection_pool.connection_kwargs.get("socket_timeout")
        self._block_slice_s: float = min(1.0, socket_timeout / 2) if socket_timeout else 1.0

    # Each kind of key has its own prefix, and the team (no ':' in a team's name, config/settings.py)
    # comes before the caller's id: no request id, whatever it holds, names another key
    # (as `r:deltas` would have named the deltas stream of `r` under `sy:req:{team}:{id}:deltas`).
    @staticmethod
    def _key(team_id: str, request_id: str) -> str:
        return f"sy:req:{team_id}:{request_id}"

    @staticmethod
    def _deltas_key(team_id: str, request_id: str) -> str:
        return f"sy:req-deltas:{team_id}:{request_id}"

    @staticmethod
    def _owner_key(team_id: str, request_id: str) -> str:
        return f"sy:req-owner:{team_id}:{request_id}"

    def _script_keys(self, team_id: str, request_id: str) -> list[str]:
        """KEYS of the claim and final scripts: record, owner, deltas."""
        return [
            self._key(team_id, request_id),
            self._owner_key(team_id, request_id),
            self._deltas_key(team_id, request_id),
        ]

    async def claim(self, team_id: str, request_id: str, digest: str) -> Claim:
        keys = self._script_keys(team_id, request_id)
        args: list[str | int] = [digest, self._ttl_s, max(1, int(self.owner_ttl_s * 1000))]
        state, result = await self._acks.run(self._redis, self._claim, keys, args)
        claim_state = ClaimState(_text(state))
        stored = json.loads(_text(result)) if claim_state in (ClaimState.DONE, ClaimState.RESUME) and result else None
        return Claim(claim_state, stored)

    @contextlib.asynccontextmanager
    async def owning(self, team_id: str, request_id: str) -> AsyncIterator[None]:
        """Keep the claim on the id this process's while the body runs (it generates). Every
        claim the process owns is renewed together, every `owner_ttl_s` / 3, in pipelines of
        `_RENEW_BATCH`: what owning costs Redis grows with the processes, not the requests."""
        key = self._owner_key(team_id, request_id)
        self._owned[key] = self._owned.get(key, 0) + 1
        if self._owner_keeper is None or self._owner_keeper.done():
            self._owner_keeper = asyncio.create_task(self._keep_owners(), name="owner-keeper")
        try:
            yield
        finally:
            if (held := self._owned.pop(key, 1) - 1) > 0:
                self._owned[key] = held

    async def renew_owners(self, owner_keys: Sequence[str]) -> None:
        """These claims' owner is alive: each stays its own for `owner_ttl_s` more."""
        ttl_ms = max(1, int(self.owner_ttl_s * 1000))
        for start in range(0, len(owner_keys), _RENEW_BATCH):
            async with self._redis.pipeline(transaction=False) as pipe:
                for key in owner_keys[start : start + _RENEW_BATCH]:
                    pipe.pexpire(key, ttl_ms)
                await pipe.execute()

    async def _keep_owners(self) -> None:
        """Renew every claim this process owns until it owns none after a renewal."""
        while self._owned:
            await asyncio.sleep(self.owner_ttl_s / 3)
            try:
                await self.renew_owners(list(self._owned))
            except aioredis.RedisError:  # Redis away for a moment: the next renewal may land
                logger.warning("could not renew the claims on %d request ids; retrying", len(self._owned))

    async def state(self, team_id: str, request_id: str) -> ClaimState | None:
        """RUNNING or DONE for a known request, None for an unknown one (claims nothing)."""
        state = await self._redis.hget(self._key(team_id, request_id), "state")
        if state is None:
            return None
        return ClaimState.DONE if _text(state) == "done" else ClaimState.RUNNING

    async def mirror(self, team_id: str, request_id: str, deltas: Sequence[GenerationDelta]) -> None:
        """Append deltas for the processes following this request (one entry, however many)."""
        stream = self._deltas_key(team_id, request_id)
        encoded = json.dumps([delta_record(delta) for delta in deltas], separators=(",", ":"))
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.xadd(stream, {"deltas": encoded})
            pipe.expire(stream, self._ttl_s)
            await pipe.execute()

    async def record_final(
        self,
        team_id: str,
        request_id: str,
        result: dict[str, Any],
        *,
        keep_s: int | None,
        followed: bool,
        resumable: bool = False,
    ) -> None:
        """The request's end: its result kept for `keep_s` (a caller-made id; None: its record
        dropped), and the followers' stream ended (`followed`), then let go. `resumable`: it
        failed after some tokens, so the next claim of the id resumes it (ClaimState.RESUME)."""
        keys = self._script_keys(team_id, request_id)
        encoded = json.dumps(result, separators=(",", ":"))
        args = [encoded, "" if keep_s is None else keep_s, "1" if followed else "0", self._follow_grace_s,
                "1" if resumable else "0"]  # fmt: skip
        await self._acks.run(self._redis, self._final, keys, args)

    async def forget(self, team_id: str, request_id: str) -> None:
        """Drop a claim whose generation never started (it was refused), so a retry may run."""
        key = self._key(team_id, request_id)
        await self._redis.delete(key, self._deltas_key(team_id, request_id), self._owner_key(team_id, request_id))

    async def follow(
        self,
        team_id: str,
        request_id: str,
        *,
        idle_timeout_s: float = 30.0,
        nudge: Callable[[], Awaitable[object]] | None = None,
    ) -> AsyncIterator[StoredDelta]:
        """Every delta mirrored so far, then live ones, until the final entry; or, when the
        request ended before its owner heard of this reader, its stored result. `nudge` runs
        at each quiet second until the first entry: it asks the owner again (a message it may
        have missed while it was still admitting the request).

        Raises TimeoutError when nothing new arrives for `idle_timeout_s` (the owner died) and
        RecordGone when the request ended and kept no record."""
        key = self._key(team_id, request_id)
        stream = self._deltas_key(team_id, request_id)
        last_id = "0-0"
        loop = asyncio.get_running_loop()
        idle_until = loop.time() + idle_timeout_s
        quiet, asked = True, False  # quiet: nothing read in the last slice (or none yet)
        while (remaining := idle_until - loop.time()) > 0:
            if quiet:
                state, result = await self._redis.hmget(key, ["state", "result"])
                if state is None:
                    raise RecordGone(f"request {request_id!r} has ended")
                if _text(state) == "done" and result is not None:
                    yield StoredDelta(final=json.loads(_text(result)))
                    return
                if nudge is not None and last_id == "0-0" and asked:
                    await nudge()
                asked = True
            wait_s = min(remaining, self._block_slice_s)
            # [(stream, [(entry_id, fields), ...])]; redis-py's type for it is a loose union.
            batch: Any = await self._blocking.xread({stream: last_id}, block=max(1, int(wait_s * 1000)), count=256)
            quiet = not batch
            if quiet:
                continue
            idle_until = loop.time() + idle_timeout_s
            for entry_id, fields in batch[0][1]:
                last_id = _text(entry_id)
                decoded = {_text(k): _text(v) for k, v in fields.items()}
                if "final" in decoded:
                    yield StoredDelta(final=json.loads(decoded["final"]))
                    return
                for record in json.loads(decoded.get("deltas", "[]")):
                    delta = delta_from_record(record)
                    yield StoredDelta(delta.text, delta.token_ids, logprobs=delta.logprobs)
        raise TimeoutError(f"request {request_id!r}: no progress for {idle_timeout_s:.0f} s")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
