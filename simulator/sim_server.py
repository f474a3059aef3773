"""One simulated server: the engine's real `Scheduler` and `BlockManager`, no model.

A step is what `LLMEngine.step` does minus the forward pass: plan (`schedule`), let the cost
model say how long the GPU takes, then mark the tokens computed (`update_after_step`), append
a sampled token to every sequence that caught up, and finish those at their length. Requests
reach the engine through the server's `TierGate`, which orders the tiers the engine's two
classes do not tell apart (priority, interactive and flex: `tier_gate.py`).

    add() ─ TierGate.arrive ─▶ engine (now, or held behind higher tiers)
    begin_step() ─ TierGate.before_step ─ schedule() ─ cost.step_s(prefill, decode, context) ─▶ duration
    end_step(now) ─ update_after_step() ─ append token / first token / finish ─▶ StepResult
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.config import EngineConfig
from engine.request import EngineRequest, FinishReason, RequestClass, SamplingParams
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import Sequence
from fleet_state.server_state import ServerState
from router.routing_policy import ServerLoad
from simulator.cost_model import StepCostModel
from simulator.sim_request import SimRequest
from simulator.tier_gate import TierGate, Withdrawn, runs_in_bulk_class

# Called for every token a reply gets: (request, now, gap since its previous token or None).
TokenSink = Callable[[SimRequest, float, float | None], None]


@dataclass(slots=True)
class StepResult:
    finished: list[SimRequest] = field(default_factory=list)
    aborted: list[SimRequest] = field(default_factory=list)
    preempted: int = 0  # sequences the step's plan preempted (recompute: they read again)
    withdrawn: Withdrawn = field(default_factory=Withdrawn)  # KV the tier gate took before the step


class SimServer:
    """A server's engine state and lifecycle; the fleet decides when its steps run."""

    def __init__(self, server_id: str, config: EngineConfig, cost: StepCostModel, created_s: float) -> None:
        self.server_id = server_id
        self.config = config
        self.cost = cost
        self.state = ServerState.STARTING
        self.created_s = created_s
        self.ready_s: float | None = None
        self.scheduler = Scheduler(config)
        self.gate = TierGate(self.scheduler, self._enqueue)
        self.requests: dict[str, SimRequest] = {}
        self.stepping = False
        self.epoch = 0  # bumped when the server dies: its pending step event is void
        self._plan: SchedulerOutput | None = None
        self._step_s = 0.0
        self._arrivals = 0
        self._withdrawn = Withdrawn()  # by the gate before the planned step
        self.kv_token_s = 0.0  # KV tokens held × seconds: the busy measure
        # Sent by the gateway since this server's last step began (the router's in-flight
        # accounting: requests the engine has not planned yet hold no blocks).
        self.sent_tokens = 0
        self.sent_requests = 0
        self.steps = 0

    @property
    def kv_capacity_tokens(self) -> int:
        return self.config.kv_capacity_tokens

    @property
    def kv_used_tokens(self) -> int:
        return self.scheduler.block_manager.num_used_blocks * self.config.block_size

    def add(self, request: SimRequest) -> None:
        """Queue a request on the server; a retry resumes from the tokens already delivered."""
        self.requests[request.request_id] = request
        request.server_id = self.server_id
        self.gate.arrive(request)

    def _enqueue(self, request: SimRequest) -> None:
        """Into the engine, resuming from the tokens already delivered (a retry, a withdrawal)."""
        run_class = RequestClass.BULK if runs_in_bulk_class(request) else RequestClass.INTERACTIVE
        engine_request = EngineRequest(
            request_id=request.request_id,
            prompt_token_ids=(0,) * request.prompt_tokens,
            sampling=SamplingParams(max_tokens=request.reply_tokens, ignore_eos=True),
            request_class=run_class,
            resume_token_ids=(0,) * request.tokens_done,
        )
        self.scheduler.add(Sequence.from_request(engine_request, arrival=self._arrivals))
        self._arrivals += 1

    def begin_step(self) -> float | None:
        """Plan the next step; its duration in seconds, or None when there is nothing to do."""
        self._withdrawn = self.gate.before_step()
        if not self.scheduler.has_unfinished():
            return None
        plan = self.scheduler.schedule()
        self.sent_tokens = self.sent_requests = 0
        prefill = decode = context = 0
        for seq, num_tokens in plan.scheduled:
            start = seq.num_computed_tokens
            context += start + num_tokens
            if num_tokens == 1 and start + 1 == len(seq.all_token_ids):  # seq.num_tokens, inlined
                decode += 1
            else:
                prefill += num_tokens
        self._plan = plan
        self._step_s = self.cost.step_s(prefill, decode, context)
        self.kv_token_s += self.kv_used_tokens * self._step_s
        self.steps += 1
        return self._step_s

    def end_step(self, now: float, on_token: TokenSink) -> StepResult:
        """Apply the planned step at `now`: tokens delivered, replies finished."""
        plan = self._plan
        assert plan is not None, "end_step without begin_step"
        self._plan = None
        result = StepResult(preempted=len(plan.preempted_ids), withdrawn=self._withdrawn)
        scheduler = self.scheduler
        scheduler.update_after_step(plan)
        requests = self.requests
        # Once per scheduled sequence per step, the exact mode's innermost loop: properties
        # (`num_tokens`, `request_id`) read through their fields.
        for seq, _ in plan.scheduled:
            if seq.num_computed_tokens != len(seq.all_token_ids):
                continue  # still reading its prompt (or recomputing)
            request = requests[seq.request.request_id]
            seq.append_token(0)
            last = request.last_token_s
            if last is None:
                gap = None
                request.first_token_s = now
            else:
                gap = now - last
            request.last_token_s = now
            request.tokens_done += 1
            on_token(request, now, gap)
            if len(seq.all_token_ids) >= seq.max_total_tokens:
                scheduler.finish_sequence(seq, FinishReason.LENGTH)
                del self.requests[seq.request_id]
                self.gate.finished(request)
                request.finished_s = now
                result.finished.append(request)
        for seq in plan.aborted:
            request = self.requests.pop(seq.request_id)
            self.gate.finished(request)
            result.aborted.append(request)
        return result

    def evict_all(self) -> list[SimRequest]:
        """The server died: every request it held, for the fleet to retry elsewhere."""
        for seq in self.scheduler.unfinished():
            self.scheduler.finish_sequence(seq, FinishReason.ABORTED)
        self.gate.take_held()
        requests = list(self.requests.values())
        self.requests.clear()
        self._plan = None
        self.stepping = False
        self.epoch += 1
        self.state = ServerState.DEAD
        return requests

    def load(self, inflight_tokens: int = 0, inflight_requests: int = 0) -> ServerLoad:
        """The router's view of this server (exact: the simulator has no scrape lag)."""
        scheduler = self.scheduler
        return ServerLoad(
            server_id=self.server_id,
            state=self.state,
            capacity_tokens=self.kv_capacity_tokens,
            free_tokens=self.kv_capacity_tokens - self.kv_used_tokens,
            active_requests=scheduler.num_running,
            waiting_requests=scheduler.num_waiting + self.gate.num_held,
            inflight_tokens=inflight_tokens,
            inflight_requests=inflight_requests,
            bulk_tokens=scheduler.held_blocks(RequestClass.BULK) * scheduler.block_manager.block_size,
        )

    @property
    def num_waiting_demand(self) -> int:
        """Priority and interactive requests on the server not admitted yet (or preempted),
        borrowed ones included: the waiting the autoscaler counts (flex waits by design)."""
        gate = self.gate
        return gate.waiting("priority") + gate.waiting("interactive") + gate.waiting("borrowed")

    @property
    def flex_kv_tokens(self) -> int:
        """KV tokens flex's admitted requests hold (it fills what runs: no server is started
        for it)."""
        get = self.scheduler.get
        blocks = sum(len(seq.block_table) for r in self.gate.queued["flex"].values() if (seq := get(r.request_id)))
        return blocks * self.config.block_size

    @property
    def is_empty(self) -> bool:
        return not self.scheduler.has_unfinished() and not self.gate.num_held
