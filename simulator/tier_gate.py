"""The four classes' rules on one simulated server (contracts/service_tier.py), over the engine's
two scheduling classes.

The engine the simulator steps (`engine.scheduler.Scheduler`) schedules two classes: its
interactive one first, then bulk, and a waiting interactive request may preempt bulk. The
server's tiers ride on that: priority, interactive and flex run in the engine's interactive
class (so each outranks bulk and may take bulk's KV, as `PREEMPTS` says), bulk and borrowed
work in its bulk class. What the engine cannot tell apart, this gate orders before handing
requests over:

    waiting      priority ─▶ interactive ─▶ flex      (CLASS_RANK; arrival order within a class)
                 a higher request takes the place of lower ones not yet admitted: those go back
                 into the gate and are handed over again behind it
    flex         handed over only while no priority or interactive request waits on the server
                 (it runs on the room the higher tiers leave)
    preemption   a priority or interactive request that cannot get its blocks even with bulk's
                 takes flex's, newest flex first (`PREEMPTS`): the flex request is withdrawn,
                 its KV freed, and it reads its prompt and the tokens it already sent again
                 later (preemption by recompute), after the bulk the engine preempts itself

    route ─▶ TierGate.arrive ─┬─▶ engine (now)
                              └─▶ held ──▶ engine, at a later step (TierGate.before_step)

What stays the engine's: the order of running sequences in a step (arrival order across the
three classes: every decode of a step fits its budget, so only prompt chunks compete) and the
victim when a running reply needs a block and no bulk is left (the newest of the engine's
interactive class, whatever its tier). Both move into the engine with its four-class scheduler;
the gate then only orders what the engine would order the same way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from contracts.service_tier import CLASS_RANK, PREEMPTS, RequestClass
from engine.block_manager import cdiv
from engine.request import FinishReason
from engine.request import RequestClass as EngineClass
from engine.scheduler import Scheduler
from engine.sequence import RequestStatus
from simulator.sim_request import FLEX, SHAPED_CLASSES, SimRequest

# The gate's classes, highest first: those the engine runs in its interactive class.
GATED = SHAPED_CLASSES
# Whose KV a blocked request of a gated class may take beyond bulk's (the engine takes bulk's).
_TAKES_FROM: dict[RequestClass, tuple[RequestClass, ...]] = {
    c: tuple(v for v in GATED if v in PREEMPTS[c]) for c in GATED
}


class TierGate:
    """Orders one server's priority, interactive and flex requests into its engine."""

    def __init__(self, scheduler: Scheduler, enqueue: Callable[[SimRequest], None]) -> None:
        self._scheduler = scheduler
        self._enqueue = enqueue
        self.held: dict[RequestClass, deque[SimRequest]] = {c: deque() for c in GATED}
        # Handed to the engine and not finished, per class, in the order handed over.
        self.queued: dict[RequestClass, dict[str, SimRequest]] = {c: {} for c in GATED}
        self.num_held = 0

    def arrive(self, request: SimRequest) -> None:
        """A request routed here: into the engine now, or held behind higher tiers."""
        if request.runs_as_bulk:
            self._enqueue(request)  # the engine's bulk class: nothing to order
            return
        request_class = request.request_class
        rank = CLASS_RANK[request_class]
        # Lower tiers not yet admitted give up their places.
        for lower in GATED[rank + 1 :]:
            for waiting in reversed(list(self._waiting(lower))):
                self._withdraw(waiting)
        self._hold(request)
        self._hand_over()

    def before_step(self) -> int:
        """Before the engine plans a step: while a higher request waits, flex gives up its place
        in the engine's queue (one the engine preempted goes back to its front) and, if the
        higher one cannot get its blocks otherwise, its KV; else held flex is handed over.
        Returns how many running requests gave up their KV."""
        preempted = 0
        if self.queued[FLEX] and self._scheduler.num_waiting and self._higher_waiting(FLEX):
            for waiting in reversed(list(self._waiting(FLEX))):
                self._withdraw(waiting)
            preempted = self._preempt_for_higher()
        if self.held[FLEX]:
            self._hand_over()
        return preempted

    def finished(self, request_id: str, request_class: RequestClass) -> None:
        """The engine is done with the request (finished, or aborted)."""
        queued = self.queued.get(request_class)
        if queued is not None:
            queued.pop(request_id, None)

    def take_held(self) -> list[SimRequest]:
        """Every request still held (the server died)."""
        held = [r for c in GATED for r in self.held[c]]
        for queue in self.held.values():
            queue.clear()
        for queued in self.queued.values():
            queued.clear()
        self.num_held = 0
        return held

    def waiting(self, request_class: RequestClass) -> int:
        """Requests of the class on this server not admitted yet (held, or queued in the engine)."""
        return len(self.held[request_class]) + sum(1 for _ in self._waiting(request_class))

    # -- inside ---------------------------------------------------------------------------------

    def _waiting(self, request_class: RequestClass) -> Iterator[SimRequest]:
        """The class's requests in the engine that are not running (waiting or preempted)."""
        get = self._scheduler.get
        for request_id, request in self.queued[request_class].items():
            seq = get(request_id)
            if seq is not None and seq.status is not RequestStatus.RUNNING:
                yield request

    def _higher_waiting(self, request_class: RequestClass) -> bool:
        higher = GATED[: CLASS_RANK[request_class]]
        return any(self.held[c] for c in higher) or any(next(self._waiting(c), None) for c in higher)

    def _hold(self, request: SimRequest, *, front: bool = False) -> None:
        queue = self.held[request.request_class]
        queue.appendleft(request) if front else queue.append(request)
        self.num_held += 1

    def _hand_over(self) -> None:
        """Held requests into the engine, highest class first; flex only while nothing above
        it waits."""
        for request_class in GATED:
            queue = self.held[request_class]
            if not queue or (request_class == FLEX and self._higher_waiting(request_class)):
                continue
            queued = self.queued[request_class]
            while queue:
                request = queue.popleft()
                self.num_held -= 1
                queued[request.request_id] = request
                self._enqueue(request)

    def _withdraw(self, request: SimRequest) -> None:
        """Take a request back from the engine (its KV freed) to the front of its held queue;
        it resumes from the tokens it already sent, read again."""
        self._scheduler.finish(request.request_id, FinishReason.CANCELLED)
        del self.queued[request.request_class][request.request_id]
        self._hold(request, front=True)

    def _preempt_for_higher(self) -> int:
        """The first waiting request of a class that takes flex's KV: if its blocks cannot be had
        even with every bulk block, withdraw running flex, newest first, until they can. Returns
        how many were withdrawn."""
        blocked = next((r for c in GATED if _TAKES_FROM[c] for r in self._waiting(c)), None)
        if blocked is None:
            return 0
        scheduler = self._scheduler
        seq = scheduler.get(blocked.request_id)
        assert seq is not None
        manager = scheduler.block_manager
        needed = cdiv(seq.num_tokens, manager.block_size)
        available = manager.num_free_blocks + scheduler.held_blocks(EngineClass.BULK)
        withdrawn = 0
        for victim_class in reversed(_TAKES_FROM[blocked.request_class]):
            running = [r for r in self.queued[victim_class].values() if _running(scheduler, r)]
            while needed > available and running:
                victim = running.pop()  # the newest
                victim_seq = scheduler.get(victim.request_id)
                assert victim_seq is not None
                available += len(victim_seq.block_table)
                self._withdraw(victim)
                withdrawn += 1
        return withdrawn


def _running(scheduler: Scheduler, request: SimRequest) -> bool:
    seq = scheduler.get(request.request_id)
    return seq is not None and seq.status is RequestStatus.RUNNING
