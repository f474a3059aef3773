"""How the simulated fleet is configured: the engine of one GPU server, the step cost, the
dispatcher's and gateway's settings, the autoscaler's spec and the simulator's own ticks.

The engine and dispatcher figures are a GPU fleet's, not the CPU defaults in switchyard.yaml:
the CPU engine caps bulk beside interactive and budgets steps by attention cost because every
token costs a CPU its full share; on a GPU a chunk rides along with the decodes nearly free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.signals import ServerCapacity
from config.settings import AutoscalerSpec
from engine.config import EngineConfig
from simulator.cost_model import RooflineCost, StepCostModel


def gpu_engine_config() -> EngineConfig:
    """One copy of the large model on an 80 GB GPU, as `switchyard plan large` sizes its KV.

    80,000 KV tokens; 64-token blocks (TensorRT-LLM's tokens_per_block); steps budgeted by
    tokens only (a huge cost cap); no prefix caching (the simulated prompts share no
    prefixes, and hashing them costs time).

    At most 512 tokens a step, not the plan's 2,048: on the roofline GPU a full decode step
    (35 replies, ~75,000 tokens of context) is memory-bound at ~33 ms, in which the GPU could
    compute ~530 tokens, so a 512-token step carries its prompt chunk for free, while a
    2,048-token chunk makes the step compute-bound at ~128 ms: every reply in it waits four
    times as long for its token, and a fleet reading 2,000-token prompts at 1,000 a second
    spends a fifth of its GPU time that way (docs/simulator.md, "Step budget").

    Reads of more than 128 tokens left yield to shorter ones (`long_prefill_tokens`): a
    30,000-token document no longer holds every chat prompt behind it for its ~2 s read.
    """
    return EngineConfig(
        kv_capacity_tokens=80_000,
        block_size=64,
        max_num_seqs=256,
        max_num_batched_tokens=512,
        max_step_cost=1e12,
        enable_chunked_prefill=True,
        enable_prefix_caching=False,
        long_prefill_tokens=128,
    )


@dataclass(frozen=True, slots=True)
class SimSettings:
    engine: EngineConfig = field(default_factory=gpu_engine_config)
    cost: StepCostModel = field(default_factory=RooflineCost)
    autoscaler: AutoscalerSpec = field(default_factory=lambda: AutoscalerSpec(enabled=True))
    pool_id: str = "large"
    min_copies: int = 1
    # Bulk leaves this share of the pool's KV to people at all times (switchyard.yaml's
    # bulk.interactive_reserve_fraction, 0.2 for the few servers of a CPU pool). A fleet of
    # hundreds needs less: 0.03 of 400 GPUs is ~12 servers, ~1,000 requests' leases, ten times
    # the Poisson swing of 1,000 req/s over the ~10 s bulk takes to turn over, and a hundred
    # times what the morning ramp adds in that time. An interactive request finding the room
    # taken preempts bulk in the engine anyway; the reserve only spares the recompute.
    reserve_fraction: float = 0.03
    # Share of prompt + max_tokens a bulk request leases (switchyard.yaml's bulk.lease_fraction,
    # quota/lease_size.py): at 1 a pool full of leases holds ~0.91 of them, a reply growing a
    # token a step; below, bulk is counted at about what it holds and a server that runs over
    # preempts bulk. Exact mode, 8 GPUs x 1 h at 1 / 0.95 / 0.92 / 0.85: busy 83.5 / 86.0 /
    # 87.4 / 90.6%, bulk done 55.4k / 56.7k / 57.9k / 57.6k (past ~0.92 bulk reads too much
    # twice: 1.7k / 2.5k / 2.7k / 5.0k preemptions), people's TTFT unchanged.
    bulk_lease_fraction: float = 0.92
    max_bulk_inflight: int = 10**9  # a GPU pool takes as many bulk requests as its KV holds
    dispatch_interval_s: float = 1.0  # the dispatcher's tick
    queue_timeout_s: float = 5.0  # priority and interactive requests wait this long for room, then 503
    # A flex request waits this long for room the higher tiers leave, then 429
    # `flex_capacity_unavailable` (contracts/service_tier.py: a bounded wait).
    flex_wait_s: float = 5.0
    load_factor: float = 1.25  # the router's bounded-load factor
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
