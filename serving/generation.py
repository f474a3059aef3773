"""Accepting one generation, whichever API it came through (`/v1/generate`, the OpenAI-style
routes): every rule about what may run lives here, so the surfaces cannot drift apart.

    route ──(team, GenerationInput)──▶ GenerationService.start()
        model known (404)? team may use it (403)? context fits (400)? (the prompt is tokenized
        for this check, once: its ids go to the server in its place, `input_ids`)
        claim (team, request_id) ── same id, other body: 409
                                 ── running here: one more reader; elsewhere: its owner mirrors
                                    its deltas to Redis and this process follows them
                                 ── done: its stored result
        admission: a lease on prompt + max_tokens of KV ── 429 / 503 with Retry-After
        registry.start() ──▶ InflightRequest, read by the route
            its RequestLifecycle (serving/request_lifecycle.py), from then on:
            as it runs:  nothing per delta (readers read memory); the lease kept alive
            at the end:  result kept for repeats (a caller-made id), lease released, usage metered
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import redis

from config.settings import SwitchyardConfig
from contracts.catalog import ModelCatalog, ServedModel
from contracts.errors import ApiError, invalid_request, model_not_found, request_conflict
from contracts.generation import (
    BackendError,
    BackendUnavailable,
    GenerationDelta,
    GenerationRequest,
    RequestClass,
    TtftPredictor,
    Usage,
)
from contracts.guided_grammar import GrammarChecker
from contracts.latency_log import LatencyLog
from contracts.prompt_context import check_context, encode_prompt
from contracts.schemas import GenerateBody
from contracts.service_tier import FLEX_CAPACITY_UNAVAILABLE, TIER_OF_CLASS
from contracts.token_ids import PackedTokenIds
from quota.admission import Admission, AdmissionRefused
from quota.leases import Lease
from router.block_hashes import DEFAULT_MAX_BLOCKS, prompt_block_hashes
from serving.delta_records import delta_from_record, logprobs_from_record
from serving.idempotency import Claim, ClaimState, IdempotencyStore, RecordGone, fingerprint
from serving.metering import Metering
from serving.metrics import GatewayMetrics
from serving.principal import Principal, forbidden, require_model_access
from serving.redis_retry import until_reachable
from serving.request_bus import BusMessage, RequestBus
from serving.request_lifecycle import LatencyStamps, RequestLifecycle
from serving.requests_registry import InflightRequest, RequestIdInUse, RequestRegistry

logger = logging.getLogger(__name__)


class RequestEnded(BackendError):
    """The request ended before this process could follow it, and kept no record."""


@dataclass(frozen=True, slots=True)
class GenerationInput:
    """What a caller asked for, already validated for types and ranges at the HTTP edge.
    `request_class` None: the team's default."""

    model: str
    prompt: str
    max_tokens: int
    stop: tuple[str, ...] = ()
    request_class: RequestClass | None = None
    request_id: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    ignore_eos: bool = False
    door: str = "http"  # the protocol it came through (`grpc`: the front door), a usage label
    # The reply goes out as it is written (a stream), or whole: what a failure bills (a whole
    # reply that fails reached no one).
    stream: bool = False
    # The grammar the reply follows (contracts/guided_grammar.py); checked in `start`, its
    # problem a 400 naming `grammar_param` (the field the caller built it with).
    guided_grammar: str | None = None
    grammar_param: str = "response_format"
    # Alternatives per generated token, and per prompt token (echo); None: not computed.
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    # Latency targets (`x-slo-ttft-ms`, `x-slo-tpot-ms`, docs/tiers.md): the first token's in
    # ms from arrival, and the most ms between tokens after it; None: no target.
    slo_ttft_ms: int | None = None
    slo_tpot_ms: int | None = None
    # The field the caller named its tier with (`class` on /v1/generate, `service_tier` on the
    # OpenAI routes): what a 403 for a tier not granted names.
    tier_param: str = "class"


def generation_input(body: GenerateBody, door: str = "http", *, stream: bool | None = None) -> GenerationInput:
    """What a validated `/v1/generate` body asks for (the gRPC door validates its tensors as
    one, so both doors take exactly the same values). `stream`: how the reply goes out, when
    not as the body says (the gRPC door's ModelInfer answers whole)."""
    return GenerationInput(
        model=body.model,
        prompt=body.prompt,
        max_tokens=body.max_tokens,
        stop=tuple(body.stop),
        request_class=body.request_class,
        request_id=body.request_id,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        ignore_eos=body.ignore_eos,
        door=door,
        stream=body.stream if stream is None else stream,
        guided_grammar=None if body.response_format is None else body.response_format.grammar(),
        slo_ttft_ms=body.slo_ttft_ms,
        slo_tpot_ms=body.slo_tpot_ms,
    )


@dataclass(frozen=True, slots=True)
class CheckedRequest:
    """A request past every check that needs no claim: whose it is, under which id, on which
    pool, and what its prompt tokenized to."""

    model: ServedModel
    team_id: str
    public_id: str  # the caller's id (or one made for it)
    scoped: str  # the id per team (`scoped_id`), the registry's and the servers' key
    request_class: RequestClass
    pool_id: str
    prompt_ids: list[int]
    prefix_block_hashes: tuple[int, ...]  # its leading full blocks', for routing (router/block_hashes.py)
    max_tokens: int
    keep_s: int | None  # how long its result is kept for repeats (None: not kept)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)


def admission_refusal(refused: AdmissionRefused) -> ApiError:
    """The answer to a refused admission: 429 (a share, a rate, or no idle room for flex), 503
    (no room), 413."""
    headers = {"Retry-After": str(refused.retry_after_s)} if refused.retry_after_s is not None else None
    status_type = {429: "rate_limit_error", 503: "service_unavailable", 413: "request_too_large"}
    return ApiError(
        refused.status, status_type.get(refused.status, "rate_limit_error"), refused.message, refused.param,
        headers, code=refused.code,
    )  # fmt: skip


def tier_not_granted(team_id: str, request_class: RequestClass, granted: Iterable[str], param: str) -> ApiError:
    """403 for a tier the team's entitlements (switchyard.yaml `teams.<team>.tiers`) leave out."""
    tiers = ", ".join(granted) or "none"
    return forbidden(
        f"team {team_id!r} may not use the {TIER_OF_CLASS[request_class]!r} tier; its tiers: {tiers} "
        "(an operator grants them under teams.<team>.tiers in switchyard.yaml)",
        param,
    )


def flex_target_unmet(predicted_s: float, slo_ttft_ms: int) -> ApiError:
    """429 for a flex request whose first-token target no server can meet now (refused at once)."""
    return ApiError(
        429,
        "rate_limit_error",
        f"no server can start this flex request within its x-slo-ttft-ms of {slo_ttft_ms} ms now "
        f"(the soonest is ~{predicted_s * 1000:.0f} ms): retry later, or without the target",
        "x-slo-ttft-ms",
        {"Retry-After": "1"},
        code=FLEX_CAPACITY_UNAVAILABLE,
    )


def body_digest(body: GenerateBody) -> str:
    """The fingerprint a repeat of the body's `request_id` must match (its id and `stream` aside)."""
    return fingerprint(body.model_dump(mode="json", by_alias=True, exclude={"request_id", "stream"}))


def scoped_id(team_id: str, request_id: str) -> str:
    """Request ids are the caller's, per team: two teams may both send `r-1`."""
    return f"{team_id}/{request_id}"


class GenerationService:
    """Starts (or attaches to) generations; raises the API's errors."""

    def __init__(
        self,
        config: SwitchyardConfig,
        catalog: ModelCatalog,
        registry: RequestRegistry,
        *,
        idempotency: IdempotencyStore,
        admission: Admission,
        metering: Metering,
        bus: RequestBus,
        metrics: GatewayMetrics | None = None,
        attach_idle_timeout_s: float = 60.0,
        latency_log: LatencyLog | None = None,
        grammars: GrammarChecker | None = None,
        predictor: TtftPredictor | None = None,
    ) -> None:
        """`latency_log`: a line of stamps per request this process ran (docs/latency.md);
        `grammars`: the checker (and its cache) of structured output's grammars; `predictor`:
        how soon a first token could come (the router's view), for latency targets."""
        self._config = config
        self._catalog = catalog
        self._registry = registry
        self._idempotency = idempotency
        self._admission = admission
        self._metering = metering
        self._bus = bus
        self._metrics = metrics
        self._attach_idle_timeout_s = attach_idle_timeout_s
        self._latency_log = latency_log  # None: no stamp lines (the default)
        self._grammars = grammars or GrammarChecker()
        self._predictor = predictor
        self._background: set[asyncio.Task[object]] = set()  # writes that outlive their request

    def model(self, model_id: str) -> ServedModel:
        model = self._catalog.get(model_id)
        if model is None:
            raise model_not_found(model_id, self._catalog.ids())
        return model

    async def start(self, principal: Principal, inp: GenerationInput, digest: str) -> InflightRequest:
        """A running (or replayed) generation for this team's request; `digest` fingerprints
        the body, so a repeated id with another body is refused."""
        started = time.time()  # wall clock, to line up with the servers' stamps (latency_log)
        checked = await self._check(principal, inp)
        local = self._registry.get(checked.scoped)  # read before the claim's await
        claim = await self._idempotency.claim(checked.team_id, checked.public_id, digest)
        if claim.state is ClaimState.CONFLICT:
            raise request_conflict(checked.public_id, "was already used with a different body; send a new request_id")
        if claim.state not in (ClaimState.NEW, ClaimState.RESUME):
            return self._existing(checked, claim, local, inp.stream)
        # A generation of this id that failed after some tokens: this one resumes it.
        resumed = claim.result if claim.state is ClaimState.RESUME else None
        lease = await self._admit(checked, resumed)
        return await self._run(checked, inp, lease, resumed, started)

    async def _check(self, principal: Principal, inp: GenerationInput) -> CheckedRequest:
        """Every refusal that needs no claim: the model (404), the team's access (403), the
        context (400), the grammar (400), the pool. All before the claim: a refusal after it
        would leave the id claimed with nothing running."""
        model = self.model(inp.model)
        team_id = require_model_access(principal, principal.team, inp.model)
        assert principal.team is not None
        prompt_ids = await encode_prompt(model, inp.prompt)
        check_context(model, len(prompt_ids), inp.max_tokens)
        if inp.guided_grammar is not None:
            await self._check_grammar(inp.guided_grammar, inp.grammar_param)
        public_id = inp.request_id or uuid.uuid4().hex
        request_class = inp.request_class or principal.team.default_class
        if TIER_OF_CLASS[request_class] not in principal.team.tier_weights:
            raise tier_not_granted(team_id, request_class, principal.team.tier_weights, inp.tier_param)
        pool_id = self._pool_for(model.model_id)
        block_size = self._config.pools[pool_id].engine.block_size
        hashes = tuple(prompt_block_hashes(prompt_ids, block_size, team_id, DEFAULT_MAX_BLOCKS))
        self._check_target(model.model_id, request_class, len(prompt_ids) + inp.max_tokens, hashes, inp)
        return CheckedRequest(
            model=model,
            team_id=team_id,
            public_id=public_id,
            scoped=scoped_id(team_id, public_id),
            request_class=request_class,
            pool_id=pool_id,
            prompt_ids=prompt_ids,
            prefix_block_hashes=hashes,
            max_tokens=inp.max_tokens,
            keep_s=self._keep_s(inp.request_id, request_class),
        )

    def _check_target(
        self, model_id: str, request_class: RequestClass, tokens: int, hashes: tuple[int, ...], inp: GenerationInput
    ) -> None:
        """A first-token target no server can meet now: a flex request is refused at once
        (429); a priority one still runs, counted as a miss (`switchyard_slo_unmeetable_total`)."""
        if inp.slo_ttft_ms is None or self._predictor is None:
            return
        predicted = self._predictor.predicted_ttft_s(model_id, tokens, hashes)
        if predicted is None or predicted * 1000 <= inp.slo_ttft_ms:
            return
        if self._metrics is not None:
            self._metrics.slo_unmeetable.labels(TIER_OF_CLASS[request_class]).inc()
        if request_class == "flex":
            raise flex_target_unmet(predicted, inp.slo_ttft_ms)

    def _existing(
        self, checked: CheckedRequest, claim: Claim, local: InflightRequest | None, stream: bool
    ) -> InflightRequest:
        """The request already claimed under this id: running here (one more reader of it),
        done (its stored result), or running elsewhere (followed through its owner's mirror)."""
        if local is not None:
            local.streamed = local.streamed or stream
            return local
        if claim.state is ClaimState.DONE and claim.result is not None:
            source = _stored(claim.result, 0)
        else:
            source = self._replay(checked.team_id, checked.public_id, BusMessage.ATTACH, self._attach_idle_timeout_s)
        entry = self._registry.attach(checked.scoped, checked.public_id, checked.model.model_id, source)
        entry.request_class = checked.request_class  # the same body from the same team: the same tier
        return entry

    async def _admit(self, checked: CheckedRequest, resumed: dict[str, Any] | None) -> Lease:
        """A lease on the request's KV (prompt + max_tokens); a refusal (429 / 503 / 413) lets
        the claim go first, so a retry with this id may run."""
        team_id, public_id = checked.team_id, checked.public_id

        async def release_claim() -> None:
            """Nothing will run under the id: free it for a retry (or leave it to be resumed)."""
            if resumed is None:
                await self._idempotency.forget(team_id, public_id)
            else:
                await self._idempotency.record_final(
                    team_id, public_id, resumed, keep_s=checked.keep_s, followed=False, resumable=True
                )

        admitting = time.monotonic()
        try:
            lease = await self._admission.admit(
                team_id, checked.pool_id, checked.prompt_tokens + checked.max_tokens, checked.request_class
            )
        except redis.RedisError:
            # Redis went away between the claim and admission (the gateway answers 503): nothing
            # will run under the id, so it is let go once Redis answers again, for the retry the
            # 503 invites to run rather than wait on a claim nobody holds.
            self._in_background(until_reachable(release_claim, what="a claim's release"))
            raise
        except AdmissionRefused as refused:
            self._observe_admission(checked.pool_id, checked.request_class, admitting)
            await release_claim()
            raise admission_refusal(refused) from None
        self._observe_admission(checked.pool_id, checked.request_class, admitting)
        return lease

    async def _run(
        self,
        checked: CheckedRequest,
        inp: GenerationInput,
        lease: Lease,
        resumed: dict[str, Any] | None,
        started: float,
    ) -> InflightRequest:
        """The admitted request handed to the registry, with the lifecycle that ends it."""
        carried = list(stored_deltas(resumed or {}, 0))
        request = self._generation_request(checked, inp, lease, resumed, carried)
        lifecycle = RequestLifecycle(
            self._idempotency, self._admission, self._metering, checked.team_id, checked.public_id,
            checked.request_class, lease, keep_s=checked.keep_s, door=inp.door,
            stamps=None if self._latency_log is None else LatencyStamps(self._latency_log, started, time.time()),
            billed_before=int((resumed or {}).get("billed_tokens", 0)),
        )  # fmt: skip
        try:
            entry = self._registry.start(request, checked.prompt_tokens, public_id=checked.public_id, hooks=lifecycle)
        except RequestIdInUse:
            await self._admission.release(lease)
            raise request_conflict(checked.public_id, "is already in flight; wait for it to end") from None
        entry.streamed = inp.stream  # before its pump first runs, so before it can end
        entry.request_class = checked.request_class
        entry.carry(carried, entry.started_at)  # a resumed reply starts with what it had
        lifecycle.keep_lease_alive(entry)
        return entry

    def _generation_request(
        self,
        checked: CheckedRequest,
        inp: GenerationInput,
        lease: Lease,
        resumed: dict[str, Any] | None,
        carried: list[GenerationDelta],
    ) -> GenerationRequest:
        """What goes to the servers: the prompt as token ids (not tokenized twice), the team's
        cache namespace and block hashes, and the tokens a resumed reply already carries."""
        return GenerationRequest(
            request_id=checked.scoped,
            model_id=checked.model.model_id,
            prompt=inp.prompt,
            max_tokens=inp.max_tokens,
            stop=inp.stop,
            # Borrowed capacity runs at bulk priority: the first the engine preempts when
            # owners return.
            request_class="bulk" if lease.borrowed else checked.request_class,
            temperature=inp.temperature,
            top_p=inp.top_p,
            top_k=inp.top_k,
            seed=request_seed(inp, resumed),
            ignore_eos=inp.ignore_eos,
            cache_namespace=checked.team_id,
            prompt_token_ids=PackedTokenIds.pack(checked.prompt_ids),
            prompt_tokens=checked.prompt_tokens,
            prefix_block_hashes=checked.prefix_block_hashes,
            guided_grammar=inp.guided_grammar,
            logprobs=inp.logprobs,
            prompt_logprobs=inp.prompt_logprobs,
            resume_token_ids=tuple(token for delta in carried for token in delta.token_ids),
            slo_ttft_ms=inp.slo_ttft_ms,
        )

    async def cancel(self, principal: Principal, public_id: str) -> InflightRequest | None:
        """Cancel a team's request wherever it runs and return it as it ended; None when the
        team has no such request."""
        if principal.team_id is None:
            return None
        scoped = scoped_id(principal.team_id, public_id)
        entry = await self._registry.cancel(scoped)
        if entry is not None:
            return entry
        state = await self._idempotency.state(principal.team_id, public_id)
        if state is None:
            return None
        # Another gateway process owns it (or owned it: then its stored result says how it ended).
        ended = self._registry.attach(
            scoped, public_id, "", self._replay(principal.team_id, public_id, BusMessage.CANCEL, 10.0)
        )
        await ended.wait_done()
        return None if isinstance(ended.error, RequestEnded) else ended

    async def on_bus_message(self, message: BusMessage, scoped: str) -> None:
        """Another process reads one of this process's requests: mirror it (a repeat attached
        there), or cancel it and end its stream for the canceller (a DELETE there)."""
        entry = self._registry.get(scoped)
        if entry is None or not isinstance(entry.hooks, RequestLifecycle):
            return
        entry.hooks.followed(entry, mirror=message is BusMessage.ATTACH)
        if message is BusMessage.CANCEL:
            await self._registry.cancel(scoped)

    async def _check_grammar(self, grammar: str, param: str) -> None:
        """400 naming `param` with llguidance's reason when `grammar` does not compile. A grammar
        seen before is answered from the cache; a new one compiles in a worker thread (bounded
        by llguidance's fuel limits and a wall-clock bound), never on the event loop."""
        known = self._grammars.known(grammar)
        problem = known[0] if known is not None else await asyncio.to_thread(self._grammars.problem, grammar)
        if problem is not None:
            raise invalid_request(f"{param}: {problem}", param)

    def _keep_s(self, request_id: str | None, request_class: str) -> int | None:
        """How long a finished request's result stays for repeats of its id: none without a
        caller-made id; bulk's briefly (its dispatcher keeps the result itself)."""
        if request_id is None:
            return None
        gateway = self._config.gateway
        return gateway.bulk_result_ttl_s if request_class == "bulk" else gateway.idempotency_ttl_s

    def _in_background(self, work: Awaitable[object]) -> None:
        """Run `work` after the request has been answered; its failure is logged."""

        async def logged() -> object:
            try:
                return await work
            except Exception:
                logger.exception("a background write failed")
                return None

        task = asyncio.create_task(logged())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _observe_admission(self, pool_id: str, request_class: str, began: float) -> None:
        if self._metrics is not None:
            self._metrics.admission_wait.labels(pool_id, request_class).observe(time.monotonic() - began)

    def _pool_for(self, model_id: str) -> str:
        pools = self._config.pools_for_model(model_id)
        if not pools:
            raise ApiError(503, "service_unavailable", f"no pool serves model {model_id!r}", "model")
        return pools[0]

    async def _replay(
        self, team_id: str, public_id: str, ask: BusMessage, idle_timeout_s: float
    ) -> AsyncIterator[GenerationDelta]:
        """A generation another process runs (or ran), from its first delta, as backend deltas.
        `ask`: what its owner is asked to do (mirror its deltas here, or cancel it)."""
        scoped = scoped_id(team_id, public_id)

        async def ask_owner() -> None:
            await self._bus.publish(ask, scoped)

        await ask_owner()
        seen = 0
        try:
            follow = self._idempotency.follow(team_id, public_id, idle_timeout_s=idle_timeout_s, nudge=ask_owner)
            async for stored in follow:
                if stored.final is None:
                    seen += 1
                    yield GenerationDelta(stored.text, stored.token_ids, logprobs=stored.logprobs)
                    continue
                async for delta in _stored(stored.final, seen):
                    yield delta
                return
        except TimeoutError as exc:  # its owner died mid-way: the record never ends
            raise BackendError(f"{exc}; the gateway running it is gone: retry with a new request_id") from None
        except RecordGone as exc:
            raise RequestEnded(str(exc)) from None
        except redis.RedisError as exc:
            # Redis failed over (or this process lost it) while following: the reply is not
            # over, and ending it as if it were would hand the client an empty 200 (a partition
            # run's batch entry recorded done with no text). The retry the 503 invites, with
            # the same id, follows it again or finds its result.
            raise BackendUnavailable(
                f"lost Redis while following request {public_id!r} ({exc}): retry with the same request_id", 1
            ) from None


def request_seed(inp: GenerationInput, resumed: dict[str, Any] | None) -> int | None:
    """The seed a generation draws from: the caller's, else for a sampled reply one made here
    (or the one the generation it resumes drew from), so a reply resumed on another server, by
    failover or by a retry of its id, goes on as the first server would have: one sampled
    reply, not two spliced together. Greedy needs none."""
    if inp.seed is not None or not inp.temperature:
        return inp.seed
    if resumed is not None and resumed.get("seed") is not None:
        return int(resumed["seed"])
    return secrets.randbits(63)


def stored_deltas(result: dict[str, Any], seen: int) -> Iterator[GenerationDelta]:
    """A stored result's deltas from delta `seen` on, its prompt's log-probabilities first."""
    if seen == 0 and result.get("prompt_logprobs") is not None:
        yield GenerationDelta(prompt_logprobs=logprobs_from_record(result["prompt_logprobs"]))
    for record in result.get("deltas", [])[seen:]:
        yield delta_from_record(record)


async def _stored(result: dict[str, Any], seen: int) -> AsyncIterator[GenerationDelta]:
    """A finished request's stored result as backend deltas, from delta `seen` on."""
    for delta in stored_deltas(result, seen):
        yield delta
    usage = Usage(**result.get("usage", {}))
    if result.get("error"):
        # A failed generation replays as the failure it was, not as a normal end.
        yield GenerationDelta(usage=usage)
        raise BackendError(result["error"])
    yield GenerationDelta(finish_reason=result.get("stop_reason") or "aborted", usage=usage)
