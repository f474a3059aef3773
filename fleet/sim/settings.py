"""How the simulated fleet is configured: the engine of one GPU server, the step cost, the
dispatcher's and gateway's settings, the autoscaler's spec and the simulator's own ticks.

The engine and dispatcher figures are a GPU fleet's, not the CPU defaults in switchyard.yaml:
the CPU engine caps bulk beside interactive and budgets steps by attention cost because every
token costs a CPU its full share; on a GPU a chunk rides along with the decodes nearly free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.config import EngineConfig
from fleet.signals import ServerCapacity
from fleet.sim.cost_model import RooflineCost, StepCostModel
from switchyard.config import AutoscalerSpec


def gpu_engine_config() -> EngineConfig:
    """One copy of the large model on an 80 GB GPU, as `switchyard plan large` sizes it.

    80,000 KV tokens; 64-token blocks (TensorRT-LLM's tokens_per_block); at most 2,048 tokens
    a step (the plan's max_num_tokens); steps budgeted by tokens only (a huge cost cap); no
    prefix caching (the simulated prompts share no prefixes, and hashing them costs time).
    """
    return EngineConfig(
        kv_capacity_tokens=80_000,
        block_size=64,
        max_num_seqs=256,
        max_num_batched_tokens=2048,
        max_step_cost=1e12,
        enable_chunked_prefill=True,
        enable_prefix_caching=False,
    )


@dataclass(frozen=True, slots=True)
class SimSettings:
    engine: EngineConfig = field(default_factory=gpu_engine_config)
    cost: StepCostModel = field(default_factory=RooflineCost)
    autoscaler: AutoscalerSpec = field(default_factory=lambda: AutoscalerSpec(enabled=True))
    pool_id: str = "large"
    min_copies: int = 1
    # Bulk leaves this share of the pool's KV to people at all times (switchyard.yaml's
    # bulk.interactive_reserve_fraction; 0.1 of a 400-GPU pool is 40 servers of burst room).
    reserve_fraction: float = 0.1
    max_bulk_inflight: int = 10**9  # a GPU pool takes as many bulk requests as its KV holds
    dispatch_interval_s: float = 1.0  # the dispatcher's tick
    queue_timeout_s: float = 5.0  # interactive requests wait this long for room, then 503
    load_factor: float = 1.25  # the router's bounded-load factor
    # Ask the share policy for each request (False: the fast mode's probes, where the fluid
    # fleet has already admitted the traffic they are fed).
    admission: bool = True
    sample_interval_s: float = 60.0
    rate_window_s: float = 60.0  # the interactive rate the autoscaler sees: arrivals over this
    seed_history_days: int = 7  # days of the scenario's own curve fed to the load profile first


def server_capacity(settings: SimSettings, prompt_mean: float, reply_mean: float, startup_s: float) -> ServerCapacity:
    """What one server carries at the average lengths, from the KV size and the cost model.

    Steady state with S = KV / (prompt + reply) seats: every step decodes S replies with
    S × (prompt + reply/2) tokens of context, and reads the prompts of the requests that
    replace the finished ones (S × prompt / reply tokens a step). A request lasts `reply`
    steps, so avg_request_s = reply × step and tokens_per_s = S × (prompt + reply) / that.
    """
    per_request = prompt_mean + reply_mean
    seats = settings.engine.kv_capacity_tokens / per_request
    step_s = settings.cost.step_s(
        round(seats * prompt_mean / reply_mean), round(seats), round(seats * (prompt_mean + reply_mean / 2))
    )
    avg_request_s = reply_mean * step_s
    return ServerCapacity(
        requests=seats,
        tokens_per_s=seats * per_request / avg_request_s,
        avg_request_s=avg_request_s,
        startup_s=startup_s,
    )
