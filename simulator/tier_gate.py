"""The four classes' rules on one simulated server (contracts/service_tier.py), over the engine's
two scheduling classes.

The engine the simulator steps (`engine.scheduler.Scheduler`) schedules two classes: its
interactive one first, then bulk; a waiting interactive request may preempt bulk, bulk never
preempts. A server's work falls in five ranks, highest first:

    rank         who                                        engine class
    priority     priority (on owned or borrowed room)       interactive
    interactive  interactive on its team's owned room       interactive
    borrowed     interactive on borrowed room               interactive
    flex         flex                                       bulk
    bulk         bulk                                       bulk

Borrowed room is the share policy's: owners take it back (quota/shares.py). Before the tiers it
ran at bulk priority; with flex a rank lower than the default tier (`PREEMPTS`: flex is taken
from first among interactive-shaped work), the default tier's work on borrowed room must still
outrank flex: at bulk priority, flex went ahead of it and took its KV, and in a surge, where
people exceed their teams' shares, that made half of it borrowed and slow (docs/simulator.md,
"Tiers"). Priority runs at its own rank wherever its lease is: an owner of the default tier is
a lower tier. What the engine's two classes cannot tell apart, this gate orders before handing
requests over, and where the engine would pick the wrong victim it frees the room itself, by
withdrawing requests (their KV freed; they read their prompt and the tokens already sent again
later, preemption by recompute, as the engine does):

    waiting      a request takes the place of waiting ones of lower ranks: they go back into
                 the gate and are handed over again behind it
    flex         handed over only while nothing above it waits on the server, and only into
                 room that is free or that withdrawing bulk frees; ahead of the bulk waiting
    blocked      a request of a rank above flex that cannot get its blocks takes bulk's KV,
                 then flex's, then (priority and owned interactive) borrowed work's, newest
                 first: owners take their room back

    route ─▶ TierGate.arrive ─┬─▶ engine (now)
                              └─▶ held ──▶ engine, at a later step (TierGate.before_step)

Running requests are withdrawn only between steps (`before_step`): a step in flight holds them
in its plan. What stays the engine's: the order of running sequences in a step (arrival order
within its class: every decode of a step fits its budget, so only prompt chunks compete) and
the victim when a running reply needs a block (the newest of the bulk class, then of the
interactive class). Both move into the engine with its four-class scheduler; the gate then
orders only what the engine orders the same way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, get_args

from engine.block_manager import cdiv
from engine.request import FinishReason
from engine.scheduler import Scheduler
from engine.sequence import RequestStatus
from simulator.sim_request import BULK, FLEX, PRIORITY, SimRequest

Rank = Literal["priority", "interactive", "borrowed", "flex"]
RANKS: tuple[Rank, ...] = get_args(Rank)  # highest first; bulk, below them all, is not held
ABOVE_FLEX: tuple[Rank, ...] = RANKS[:-1]
OWNERS: tuple[Rank, ...] = ("priority", "interactive")  # who takes borrowed room back


def rank_of(request: SimRequest) -> Rank | None:
    """The request's rank on a server (None: bulk, which the engine's bulk class orders)."""
    if request.request_class == BULK:
        return None
    if request.request_class in (PRIORITY, FLEX):
        return request.request_class  # type: ignore[return-value]  # both are ranks
    return "borrowed" if request.borrowed else "interactive"


def runs_in_bulk_class(request: SimRequest) -> bool:
    """Whether the engine runs the request in its bulk class (flex and bulk)."""
    return request.request_class in (FLEX, BULK)


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """Running requests the gate took KV from since the last step."""

    flex: int = 0  # for a higher rank
    bulk: int = 0  # for a higher rank or for flex
    borrowed: int = 0  # for an owner


_NONE = Withdrawn()


class TierGate:
    """Orders one server's requests into its engine by rank (module docstring)."""

    def __init__(self, scheduler: Scheduler, enqueue: Callable[[SimRequest], None]) -> None:
        self._scheduler = scheduler
        self._enqueue = enqueue
        self.held: dict[Rank, deque[SimRequest]] = {r: deque() for r in RANKS}
        # Handed to the engine and not finished, per rank, in the order handed over.
        self.queued: dict[Rank, dict[str, SimRequest]] = {r: {} for r in RANKS}
        self.bulk: dict[str, SimRequest] = {}
        self.num_held = 0
        self._taken = {"flex": 0, "bulk": 0, "borrowed": 0}  # running requests withdrawn since the last step

    def arrive(self, request: SimRequest) -> None:
        """A request routed here: into the engine now, or held behind higher ranks."""
        rank = rank_of(request)
        if rank is None:
            self.bulk[request.request_id] = request
            self._enqueue(request)
            return
        for lower in RANKS[RANKS.index(rank) + 1 :]:  # waiting lower ranks give up their places
            self._withdraw_all(self._waiting(lower))
        self._hold(request, rank)
        self._hand_over(may_withdraw=False)  # a step may be in flight: its plan holds the running

    def before_step(self) -> Withdrawn:
        """Between steps: room for a blocked request above flex, then held flex handed over."""
        if self._scheduler.num_waiting:
            self._free_for_blocked()
        if self.held["flex"]:
            self._hand_over()
        taken = self._taken
        if not (taken["flex"] or taken["bulk"] or taken["borrowed"]):
            return _NONE
        withdrawn = Withdrawn(taken["flex"], taken["bulk"], taken["borrowed"])
        self._taken = {"flex": 0, "bulk": 0, "borrowed": 0}
        return withdrawn

    def finished(self, request: SimRequest) -> None:
        """The engine is done with the request (finished, or aborted)."""
        rank = rank_of(request)
        (self.bulk if rank is None else self.queued[rank]).pop(request.request_id, None)

    def take_held(self) -> list[SimRequest]:
        """Every request still held (the server died); the gate forgets everything."""
        held = [r for rank in RANKS for r in self.held[rank]]
        for queue in self.held.values():
            queue.clear()
        for queued in self.queued.values():
            queued.clear()
        self.bulk.clear()
        self.num_held = 0
        return held

    def waiting(self, rank: Rank) -> int:
        """Requests of the rank on this server not admitted yet (held, or queued in the engine)."""
        return len(self.held[rank]) + sum(1 for _ in self._waiting(rank))

    # -- inside ---------------------------------------------------------------------------------

    def _waiting(self, rank: Rank) -> Iterator[SimRequest]:
        """The rank's requests in the engine that are not running (waiting, or preempted)."""
        get = self._scheduler.get
        for request in self.queued[rank].values():
            seq = get(request.request_id)
            if seq is not None and seq.status is not RequestStatus.RUNNING:
                yield request

    def _running(self, requests: Iterable[SimRequest]) -> list[SimRequest]:
        get = self._scheduler.get
        running = []
        for request in requests:
            seq = get(request.request_id)
            if seq is not None and seq.status is RequestStatus.RUNNING:
                running.append(request)
        return running

    def _above_flex_waiting(self) -> bool:
        return any(self.held[r] for r in ABOVE_FLEX) or any(next(self._waiting(r), None) for r in ABOVE_FLEX)

    def _blocks(self, request: SimRequest) -> int:
        seq = self._scheduler.get(request.request_id)
        return 0 if seq is None else len(seq.block_table)

    def _hold(self, request: SimRequest, rank: Rank, *, front: bool = False) -> None:
        queue = self.held[rank]
        queue.appendleft(request) if front else queue.append(request)
        self.num_held += 1

    def _give(self, rank: Rank) -> None:
        request = self.held[rank].popleft()
        self.num_held -= 1
        self.queued[rank][request.request_id] = request
        self._enqueue(request)

    def _hand_over(self, *, may_withdraw: bool = True) -> None:
        """Held requests into the engine, highest rank first; flex only while nothing above it
        waits, into free room (bulk withdrawn for it between steps), ahead of waiting bulk."""
        for rank in ABOVE_FLEX:
            while self.held[rank]:
                self._give(rank)
        queue = self.held["flex"]
        if not queue or self._above_flex_waiting():
            return
        manager = self._scheduler.block_manager
        free = manager.num_free_blocks
        bulk = self._running(self.bulk.values()) if may_withdraw else []
        given = False
        while queue:
            request = queue[0]
            # Room for its whole lease: its reply grows a block at a time, and a reply that
            # outgrows the room takes it from the newest of the bulk class, flex's or bulk's.
            needed = cdiv(request.prompt_tokens + request.reply_tokens, manager.block_size)
            if needed > free + sum(self._blocks(r) for r in bulk):
                break
            while needed > free:
                victim = bulk.pop()  # the newest
                free += self._blocks(victim)
                self._requeue(victim)
            free -= needed
            self._give("flex")
            given = True
        if given:  # flex joined the engine's bulk class: ahead of the bulk waiting there
            get = self._scheduler.get
            for request in list(self.bulk.values()):
                seq = get(request.request_id)
                if seq is not None and seq.status is not RequestStatus.RUNNING:
                    self._requeue(request, running=False)

    def _withdraw_all(self, requests: Iterator[SimRequest]) -> None:
        for request in reversed(list(requests)):  # each to the front: they keep their order
            self._withdraw(request)

    def _withdraw(self, request: SimRequest, *, running: bool = False) -> None:
        """Take a ranked request back from the engine (its KV freed) to the front of its held
        queue; it resumes from the tokens it already sent, read again."""
        rank = rank_of(request)
        assert rank is not None
        self._scheduler.finish(request.request_id, FinishReason.CANCELLED)
        del self.queued[rank][request.request_id]
        self._hold(request, rank, front=True)
        if running:
            self._taken[rank] += 1

    def _requeue(self, request: SimRequest, *, running: bool = True) -> None:
        """A bulk request back to the end of the engine's bulk queue (a running one's KV freed)."""
        self._scheduler.finish(request.request_id, FinishReason.CANCELLED)
        self._enqueue(request)
        if running:
            self._taken["bulk"] += 1

    def _free_for_blocked(self) -> None:
        """The first waiting request above flex: while its blocks are not free, free them, newest
        first: bulk's, flex's, and for an owner borrowed work's. Waiting flex steps back for it."""
        blocked = next((r for rank in ABOVE_FLEX for r in self._waiting(rank)), None)
        if blocked is None:
            return
        self._withdraw_all(self._waiting("flex"))
        scheduler = self._scheduler
        seq = scheduler.get(blocked.request_id)
        assert seq is not None
        needed = cdiv(seq.num_tokens, scheduler.block_manager.block_size)
        free = scheduler.block_manager.num_free_blocks
        if needed <= free:
            return
        victims = [(v, True) for v in self._running(self.bulk.values())]
        victims += [(v, False) for v in self._running(self.queued["flex"].values())]
        if rank_of(blocked) in OWNERS:
            victims += [(v, False) for v in self._running(self.queued["borrowed"].values())]
        # Newest first within each rank, the lowest rank first: the list is lowest first already
        # by rank, so take each rank's from its end.
        for victim, is_bulk in _lowest_first_newest_first(victims):
            if needed <= free:
                break
            free += self._blocks(victim)
            if is_bulk:
                self._requeue(victim)
            else:
                self._withdraw(victim, running=True)


def _lowest_first_newest_first(victims: list[tuple[SimRequest, bool]]) -> list[tuple[SimRequest, bool]]:
    """`victims` grouped by rank (bulk, flex, borrowed: lowest first, each in the order handed
    over), each group reversed: the newest of the lowest rank goes first."""
    groups: dict[Rank | None, list[tuple[SimRequest, bool]]] = {}
    for victim in victims:
        groups.setdefault(rank_of(victim[0]), []).append(victim)
    return [victim for group in groups.values() for victim in reversed(group)]
