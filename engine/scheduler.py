"""Which sequences compute how many tokens in the next step, and who gives up memory.

There is no prefill phase (vLLM v1's framing): each sequence has known tokens and computed
tokens and wants to catch up. One step hands out a budget class by class, highest first
(engine/request.py's RequestClass), running then waiting in each:

    1. running priority      (decodes, then the next chunks of half-read prompts, oldest first)
    2. waiting priority      (admitted when their blocks can be had; may preempt flex and bulk)
    3. running interactive
    4. waiting interactive   (may preempt flex and bulk; not while priority waits for memory)
    5. running flex
    6. waiting flex          (may preempt bulk; not while a higher class waits for memory)
    7. running bulk          (beside interactive-shaped work, at most max_bulk_seqs_beside_interactive
                              sequences adding at most max_bulk_cost_beside_interactive)
    8. waiting bulk          (not while an interactive-shaped request waits for memory)

A waiting queue is ordered, within its class: sequences preempted to recompute first (oldest
first), then by TTFT deadline (arrival + `slo_ttft_ms`, earliest first), then those without
one, in arrival order. Admission takes from the front only: no overtaking.

With `long_prefill_tokens` set, a read with more than that many tokens left takes at most that
many in its class's steps; once its class is planned, the capped reads share what is left,
shortest first. Short prompts behind a long document start within a few steps, and a long
read alone still takes the whole budget.

The budget counts *cost*, not only tokens: a token attending to `ctx` positions costs
`1 + ctx / attention_cost_tokens`, so a chunk deep inside a 30,000-token prompt is small and
the decodes riding in the same step keep their pace. A step that would plan nothing plans one
token anyway, so work always moves. With `enable_chunked_prefill=False` (the benchmarks'
baseline) a prompt is read whole in one step; the first prompt of a step may exceed the budget.

With `express_max_tokens` set, a short interactive-shaped request (priority, interactive or
flex) goes first: while one (asking for at most that many tokens, its unread prompt within one
step's tokens) waits or runs, a step plans only such requests, class by class, and the rest
wait, for at most `express_max_tokens` steps in a row; then a step plans everyone as above.
On a CPU a lone short reply's step costs a fraction of one with every long stream in it, so a
ten-token answer behind long reports ends near its idle time, and the streams lose a few cheap
steps (S1, docs/latency.md).

Memory: a request is admitted only when blocks for all its known tokens can be had (so a long
prompt, once admitted, is never preempted for lack of room to read it). A sequence of class c
takes blocks only from running sequences of the classes PREEMPTS[c] names (engine/request.py:
priority and interactive from flex and bulk, flex from bulk, bulk from nobody), lowest class
first, newest first, by recompute: their KV is dropped and they resume token for token later.
So priority never preempts interactive, and no class a higher one. A waiting request preempts
only if that makes room for it. A running sequence that still lacks a block for its next token
then takes it from the newest running sequence of its own class, itself if it is the newest
(the oldest keep going, as in vLLM). Nothing fails for lack of memory, except a request that
could not fit even in an empty cache: it is aborted instead of waiting forever.
"""

from __future__ import annotations

import math
from bisect import insort
from collections import deque
from dataclasses import dataclass, field

from engine.block_manager import BlockManager, PrefixMatch, cdiv
from engine.config import EngineConfig
from engine.request import CLASS_ORDER, PREEMPTS, FinishReason, RequestClass
from engine.sequence import RequestStatus, Sequence


def chunk_cost(start: int, num_tokens: int, attention_cost_tokens: float) -> float:
    """Cost of computing positions [start, start + num_tokens): the token at p attends p + 1."""
    attended = num_tokens * start + num_tokens * (num_tokens + 1) // 2
    return num_tokens + attended / attention_cost_tokens


def max_chunk_tokens(start: int, want: int, cost_left: float, attention_cost_tokens: float) -> int:
    """The most tokens (<= want) starting at `start` whose cost fits in `cost_left`.

    Solves n + (n*start + n(n+1)/2) / A <= C for n (a quadratic), then fixes float rounding.
    """
    if want <= 0 or cost_left <= 0:
        return 0
    a = attention_cost_tokens
    b = 2 * a + 2 * start + 1
    n = min(want, int((-b + math.sqrt(b * b + 8 * a * cost_left)) / 2))
    while n > 0 and chunk_cost(start, n, a) > cost_left:
        n -= 1
    while n < want and chunk_cost(start, n + 1, a) <= cost_left:
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class SchedulerOutput:
    """One step's plan: `scheduled` pairs each sequence with how many tokens it computes."""

    scheduled: list[tuple[Sequence, int]]
    preempted_ids: list[str]
    # Requests finished by the scheduler itself (they can never fit); report them as ABORTED.
    aborted: list[Sequence]
    # Scheduled sequences still reading known tokens (TensorRT-LLM's "context" requests).
    num_context: int


@dataclass(slots=True)
class _Step:
    """What is left of one step's budget, and what has been planned so far."""

    tokens_left: int
    cost_left: float
    seqs_left: int
    scheduled: list[tuple[Sequence, int]] = field(default_factory=list)
    preempted_ids: list[str] = field(default_factory=list)
    num_context: int = 0
    has_multi_token_chunk: bool = False
    # The highest class whose front request waits for memory this step: memory that frees up
    # is spoken for, so no lower class is admitted after it.
    blocked_on_memory: RequestClass | None = None
    capped: list[int] = field(default_factory=list)  # indexes in `scheduled` of long reads held to the cap


class Scheduler:
    """Plans steps over the waiting and running sequences; owns their queues and the blocks.

    Plain object: no clock, no threads, no I/O. The engine calls `add`, `schedule`,
    `update_after_step` and `finish`.
    """

    def __init__(self, config: EngineConfig, block_manager: BlockManager | None = None) -> None:
        self.config = config
        self.block_manager = block_manager or BlockManager.from_config(config)
        self._waiting: dict[RequestClass, deque[Sequence]] = {cls: deque() for cls in CLASS_ORDER}
        # Per class, ordered by arrival: scheduling walks from the front, preemption pops the
        # back (the newest), so a victim is never a sequence already planned in this step.
        self._running: dict[RequestClass, list[Sequence]] = {cls: [] for cls in CLASS_ORDER}
        self._by_id: dict[str, Sequence] = {}
        self._aborted: list[Sequence] = []
        self.num_preemptions = 0  # cumulative, for tests and diagnostics
        # The same by the preempted sequence's class (the engine's preemption gauge).
        self.preemptions: dict[RequestClass, int] = dict.fromkeys(CLASS_ORDER, 0)
        # Express steps in a row that left some unfinished sequence out (see _plan_express).
        self.num_held_steps = 0

    # -- queries ----------------------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return sum(len(q) for q in self._running.values())

    @property
    def num_waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    def num_unfinished(self, request_class: RequestClass) -> int:
        """Running and waiting sequences of one class."""
        return len(self._running[request_class]) + len(self._waiting[request_class])

    def held_blocks(self, request_class: RequestClass) -> int:
        """KV blocks held by the admitted sequences of one class, as preemption counts them (a
        block two of them share counts twice)."""
        return sum(len(seq.block_table) for seq in self._running[request_class])

    def has_unfinished(self) -> bool:
        return bool(self._by_id) or bool(self._aborted)

    def get(self, request_id: str) -> Sequence | None:
        return self._by_id.get(request_id)

    def unfinished(self) -> list[Sequence]:
        return list(self._by_id.values())

    def fits_ever(self, seq: Sequence) -> bool:
        """Whether `seq` could run to its end in an otherwise empty cache.

        The last token of a reply is sampled but never computed, hence the `- 1`.
        """
        positions = max(seq.max_total_tokens - 1, seq.num_tokens)
        return cdiv(positions, self.block_manager.block_size) <= self.block_manager.num_blocks

    # -- lifecycle --------------------------------------------------------------------------

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence; one that can never fit is aborted at the next `schedule`."""
        if not self.fits_ever(seq):
            seq.status = RequestStatus.FINISHED
            seq.finish_reason = FinishReason.ABORTED
            self._aborted.append(seq)
            return
        self._by_id[seq.request_id] = seq
        self._queue(seq)

    def finish(self, request_id: str, reason: FinishReason) -> Sequence | None:
        """Finish a request wherever it is and free its blocks; None if it is not here."""
        seq = self._by_id.get(request_id)
        if seq is not None:
            self.finish_sequence(seq, reason)
        return seq

    def finish_sequence(self, seq: Sequence, reason: FinishReason) -> None:
        if seq.status is RequestStatus.RUNNING:
            self._running[seq.request_class].remove(seq)
        elif seq.status is not RequestStatus.FINISHED:
            self._waiting[seq.request_class].remove(seq)
        self.block_manager.free(seq)
        seq.status = RequestStatus.FINISHED
        seq.finish_reason = reason
        self._by_id.pop(seq.request_id, None)

    # -- planning ---------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        config = self.config
        step = _Step(config.max_num_batched_tokens, config.max_step_cost, config.max_num_seqs)
        if self._plan_express(step):
            return SchedulerOutput(step.scheduled, step.preempted_ids, self.pop_aborted(), step.num_context)
        self.num_held_steps = 0
        for cls in CLASS_ORDER:
            if not cls.is_interactive_shaped and step.scheduled:
                self._cap_bulk_beside_interactive(step)
            self._schedule_running(cls, step)
            self._schedule_waiting(cls, step)
            self._top_up_long_reads(step)
        return SchedulerOutput(step.scheduled, step.preempted_ids, self.pop_aborted(), step.num_context)

    def _cap_bulk_beside_interactive(self, step: _Step) -> None:
        """Interactive-shaped work is in this step: let at most the configured number of bulk
        sequences, adding at most the configured cost, join it. The oldest go first; the rest
        keep their blocks and wait, and being the newest they are the first preempted if
        memory runs short. A bulk prompt being read goes on in small chunks meanwhile."""
        cap = self.config.max_bulk_seqs_beside_interactive
        if cap is not None:
            step.seqs_left = min(step.seqs_left, cap)
        cost_cap = self.config.max_bulk_cost_beside_interactive
        if cost_cap is not None:
            step.cost_left = min(step.cost_left, cost_cap)

    # -- the express lane -------------------------------------------------------------------

    def is_express(self, seq: Sequence) -> bool:
        """A short interactive-shaped request that goes before everyone (`express_max_tokens`)."""
        limit = self.config.express_max_tokens
        return (
            limit is not None
            and seq.request_class.is_interactive_shaped
            and seq.sampling.max_tokens <= limit
            and seq.num_tokens - seq.num_computed_tokens <= self.config.max_num_batched_tokens
        )

    def _plan_express(self, step: _Step) -> bool:
        """Plan a step of express requests only; False (nothing planned) when there are none,
        or when the others have already been held back `express_max_tokens` steps in a row.

        Class by class, highest first: the running express sequences in arrival order, then the
        waiting ones at the front of the class's queue (no overtaking: a normal request ahead of
        them keeps its place). Preemption for a block takes from a lower class (not planned
        yet) or the newest of the class (behind the one being planned), so it never takes back
        a planned sequence."""
        limit = self.config.express_max_tokens
        if limit is None or self.num_held_steps >= limit:
            return False
        classes = [cls for cls in CLASS_ORDER if cls.is_interactive_shaped]
        if not any(self._has_express(cls) for cls in classes):
            return False
        for cls in classes:
            self._plan_express_running(cls, step)
            self._schedule_waiting(cls, step, express_only=True)
        self._top_up_long_reads(step)
        if not step.scheduled:
            return False
        # Held back: anything unfinished left out of this step (running or waiting).
        self.num_held_steps = self.num_held_steps + 1 if len(step.scheduled) < len(self._by_id) else 0
        return True

    def _has_express(self, cls: RequestClass) -> bool:
        waiting = self._waiting[cls]
        return any(self.is_express(seq) for seq in self._running[cls]) or bool(waiting and self.is_express(waiting[0]))

    def _plan_express_running(self, cls: RequestClass, step: _Step) -> None:
        block_size = self.block_manager.block_size
        for seq in [seq for seq in self._running[cls] if self.is_express(seq)]:
            if step.seqs_left <= 0 or step.tokens_left <= 0:
                return
            if seq.status is not RequestStatus.RUNNING:
                continue  # preempted for the block of one planned before it
            start = seq.num_computed_tokens
            num_tokens = self._chunk_size(seq, start, step)
            if num_tokens == 0:
                continue
            if start + num_tokens > len(seq.block_table) * block_size and not self._reserve_slots(
                seq, num_tokens, step
            ):
                continue
            self._plan(seq, num_tokens, step)

    def pop_aborted(self) -> list[Sequence]:
        """Sequences aborted since the last call because they can never fit (each reported once)."""
        aborted, self._aborted = self._aborted, []
        return aborted

    def update_after_step(self, output: SchedulerOutput) -> None:
        """Mark the planned tokens computed and cache the blocks they filled."""
        bm = self.block_manager
        block_size = bm.block_size
        for seq, num_tokens in output.scheduled:
            seq.num_computed_tokens += num_tokens
            if seq.num_computed_tokens // block_size > seq.num_registered_blocks:
                bm.register_full_blocks(seq)

    def _schedule_running(self, cls: RequestClass, step: _Step) -> None:
        """Decodes first, then chunks of half-read prompts, so a long read never stalls a stream.

        Runs once per running sequence per step: decodes take an inlined path (no solve, no
        block-manager call unless a block boundary is crossed) to keep schedule() cheap.
        """
        running = self._running[cls]
        block_size = self.block_manager.block_size
        attention_cost_tokens = self.config.attention_cost_tokens
        readers: list[Sequence] = []
        i = 0
        while i < len(running) and step.seqs_left > 0 and step.tokens_left > 0:
            seq = running[i]
            i += 1
            start = seq.num_computed_tokens
            if len(seq.all_token_ids) - start > 1:
                readers.append(seq)
                continue
            cost = 1 + (start + 1) / attention_cost_tokens
            if cost > step.cost_left and step.scheduled:
                continue
            if start + 1 > len(seq.block_table) * block_size and not self._reserve_slots(seq, 1, step):
                break  # seq preempted itself: it was the last unplanned one of its class
            self._plan(seq, 1, step)
        # Readers hold blocks for all their known tokens since admission: no preemption here.
        for seq in readers:
            if step.seqs_left <= 0 or step.tokens_left <= 0:
                return
            num_tokens = self._chunk_size(seq, seq.num_computed_tokens, step)
            if num_tokens:
                assert self.block_manager.num_new_blocks(seq, num_tokens) == 0
                self._plan(seq, num_tokens, step)

    def _schedule_waiting(self, cls: RequestClass, step: _Step, *, express_only: bool = False) -> None:
        """Admit from the front of the class's queue while blocks and budget allow
        (`express_only`: while the front is an express request)."""
        waiting = self._waiting[cls]
        if step.blocked_on_memory is not None:
            return  # a higher class waits for memory: what frees up is spoken for
        while waiting and step.seqs_left > 0 and step.tokens_left > 0:
            if self.num_running >= self.config.max_num_seqs:
                return
            seq = waiting[0]
            if express_only and not self.is_express(seq):
                return
            match = self.block_manager.match_prefix(seq)
            num_tokens = self._chunk_size(seq, match.num_tokens, step)
            if num_tokens == 0:
                return
            admitted_match = self._make_room(seq, match, step)
            if admitted_match is None:
                if step.blocked_on_memory is None:
                    step.blocked_on_memory = cls
                return  # in queue order within a class: no overtaking
            waiting.popleft()
            self._admit(seq, admitted_match)
            self._plan(seq, num_tokens, step)

    def _chunk_size(self, seq: Sequence, start: int, step: _Step) -> int:
        """How many tokens from `start` this step can give `seq` (0: none)."""
        want = seq.num_tokens - start
        if want <= 0:
            return 0
        a = self.config.attention_cost_tokens
        if want > 1 and not self.config.enable_chunked_prefill:
            # Unchunked baseline: the whole prompt or nothing. The first prompt of a step may
            # overflow the budget, otherwise a long prompt could never run.
            fits = want <= step.tokens_left and chunk_cost(start, want, a) <= step.cost_left
            return want if fits or not step.has_multi_token_chunk else 0
        if want == 1:  # a decode: the common case, kept free of the quadratic solve
            num_tokens = 1 if 1 + (start + 1) / a <= step.cost_left else 0
        else:
            num_tokens = max_chunk_tokens(start, min(want, step.tokens_left), step.cost_left, a)
        if num_tokens == 0 and not step.scheduled:
            return 1  # progress is guaranteed: a step never plans nothing while work waits
        cap = self.config.long_prefill_tokens
        return cap if cap is not None and num_tokens > cap else num_tokens

    def _top_up_long_reads(self, step: _Step) -> None:
        """The long reads held to `long_prefill_tokens` this step share what the rest of their
        class left, the one with the fewest tokens left to read first."""
        capped, step.capped = step.capped, []
        a = self.config.attention_cost_tokens

        def left(index: int) -> int:
            seq, planned = step.scheduled[index]
            return seq.num_tokens - seq.num_computed_tokens - planned

        for index in sorted(capped, key=left):
            if step.tokens_left <= 0:
                return
            seq, planned = step.scheduled[index]
            start = seq.num_computed_tokens + planned
            more = max_chunk_tokens(start, min(left(index), step.tokens_left), step.cost_left, a)
            if more:
                step.scheduled[index] = (seq, planned + more)
                step.tokens_left -= more
                step.cost_left -= chunk_cost(start, more, a)

    def _plan(self, seq: Sequence, num_tokens: int, step: _Step) -> None:
        start = seq.num_computed_tokens
        cap = self.config.long_prefill_tokens
        if cap is not None and num_tokens == cap and seq.num_tokens - start > cap:
            step.capped.append(len(step.scheduled))
        step.scheduled.append((seq, num_tokens))
        step.tokens_left -= num_tokens
        step.seqs_left -= 1
        if num_tokens == 1:
            step.cost_left -= 1 + (start + 1) / self.config.attention_cost_tokens
        else:
            step.cost_left -= chunk_cost(start, num_tokens, self.config.attention_cost_tokens)
            step.has_multi_token_chunk = True
        # TensorRT-LLM's "context" phase: reading known tokens (a prompt, or a recompute after
        # preemption), as opposed to decoding the one token sampled last step.
        if start < seq.num_prompt_tokens or start + 1 < len(seq.all_token_ids):
            step.num_context += 1

    # -- memory -----------------------------------------------------------------------------

    def _reserve_slots(self, seq: Sequence, num_tokens: int, step: _Step) -> bool:
        """Get `seq` the blocks for `num_tokens` more, preempting if needed.

        Returns False when `seq` itself had to be preempted.
        """
        bm = self.block_manager
        while not bm.can_append(seq, num_tokens):
            victim = self._pop_victim(seq.request_class)
            assert victim is not None, "seq itself is always a candidate"
            self._preempt(victim, step)
            if victim is seq:
                return False
        bm.append_slots(seq, num_tokens)
        return True

    def _make_room(self, seq: Sequence, match: PrefixMatch, step: _Step) -> PrefixMatch | None:
        """The match to admit `seq` with once its blocks can be had, or None to wait.

        A waiting request preempts only the classes PREEMPTS names for it (lowest first, newest
        first), and only if that would make room: people never wait on memory held by flex or
        bulk, and nobody preempts work it could not then replace.
        """
        bm = self.block_manager
        if bm.can_allocate(match, seq.num_tokens):
            return match
        victim_classes = PREEMPTS[seq.request_class]
        needed = cdiv(seq.num_tokens, bm.block_size) - len(match.block_ids)
        preemptible = sum(self.held_blocks(cls) for cls in victim_classes)
        if not victim_classes or needed > bm.num_free_blocks - match.num_free_hits + preemptible:
            return None
        for cls in victim_classes:
            running = self._running[cls]
            while running:
                self._preempt(running.pop(), step)
                match = bm.match_prefix(seq)  # freed blocks may include hits: recount them
                if bm.can_allocate(match, seq.num_tokens):
                    return match
        return None  # shared blocks made the estimate optimistic

    def _pop_victim(self, requester: RequestClass) -> Sequence | None:
        """The newest running sequence of the lowest class `requester` may preempt, else the
        newest of its own class (a running requester is one of them, so there is always one)."""
        for cls in (*PREEMPTS[requester], requester):
            if self._running[cls]:
                return self._running[cls].pop()
        return None

    def _preempt(self, victim: Sequence, step: _Step) -> None:
        """Recompute preemption: drop the KV, queue at the front of the class to redo it."""
        self.block_manager.free(victim)
        victim.reset_for_recompute()
        self.num_preemptions += 1
        self.preemptions[victim.request_class] += 1
        self._queue(victim)
        step.preempted_ids.append(victim.request_id)

    def _queue(self, seq: Sequence) -> None:
        """Put `seq` in its class's waiting queue, in `_waiting_order`."""
        waiting = self._waiting[seq.request_class]
        if not waiting or _waiting_order(waiting[-1]) <= _waiting_order(seq):
            waiting.append(seq)  # the common case: a request without a target, the newest
        else:
            insort(waiting, seq, key=_waiting_order)

    def _admit(self, seq: Sequence, match: PrefixMatch) -> None:
        self.block_manager.allocate(seq, match, seq.num_tokens)
        if seq.num_preemptions == 0:
            seq.num_cached_tokens = min(match.num_tokens, len(seq.request.prompt_token_ids))
        seq.status = RequestStatus.RUNNING
        insort(self._running[seq.request_class], seq, key=_arrival)


def _arrival(seq: Sequence) -> int:
    return seq.arrival


def _waiting_order(seq: Sequence) -> tuple[bool, bool, float, int]:
    """A waiting queue's order: preempted sequences first (they have started; oldest first), then
    by TTFT deadline, earliest first, then those without one; arrival order breaks ties."""
    deadline = seq.ttft_deadline
    return (seq.status is not RequestStatus.PREEMPTED, deadline is None, deadline or 0.0, seq.arrival)
