"""The live benchmarks, run on stacks of their own made from one configuration: what
`python -m bench [NAME ...]` runs for the live names, and `python -m bench gpu` for S1, S3 and
S4 on TensorRT-LLM.

The live benchmarks share one stack (gateway + one Triton server per bench pool) on free
ports, so every ratio compares variants measured side by side in the same run; s4 and s78
run a pool of several servers (four, two) in a stack of their own, and sim-trust one server
that streams every step's tokens.
"""

from __future__ import annotations

import shutil

from bench import (
    bench_grpc_door,
    bench_s1_short_behind_long,
    bench_s2_document_full_server,
    bench_s3_prefill_stutter,
    bench_s4_prefix_routing,
    bench_s5_bulk_backlog,
    bench_s7_s8_failover_drain,
    bench_s9_team_flood,
    bench_serving_overhead,
    bench_sim_trust,
    bench_tiers,
)
from bench.live import engine_config_of, start_stack
from config.settings import EngineSpec, SwitchyardConfig, load_config
from stack.measured_stack import measured_config, with_copies

LIVE = ("s1", "s2", "s3", "overhead", "s9", "s5", "s4", "s78", "sim-trust", "grpc-door", "tiers")


def run_live(names: list[str], base: SwitchyardConfig | None = None) -> dict[str, dict[str, object]]:
    """Run the live benchmarks `names` on stacks made from `base` (default: switchyard.yaml)
    and return each one's result ({"rows": ..., "meta": ...}) by name.

    One stack per team layout: each scenario's shares are what its story needs."""
    base = load_config() if base is None else base
    results: dict[str, dict[str, object]] = {}
    engine = base.pools["small"].engine
    unchunked = EngineSpec(**{**engine.model_dump(), "enable_chunked_prefill": False})
    if {"s1", "s3"} & set(names):
        pools = {"bench-small": ("small", engine), "bench-small-unchunked": ("small", unchunked)}
        s1_models = {"small": "bench-small"}
        if "s1" in names and "large" in base.models:  # S1 runs on both sizes
            pools["bench-large"] = ("large", base.pools["large"].engine if "large" in base.pools else engine)
            s1_models["large"] = "bench-large"
        config = measured_config(base, pools, {"bench": 1.0})
        stack, teams = start_stack(config)
        url, headers = stack.gateway_url, teams["bench"]
        try:
            if "s1" in names:
                results["s1"] = bench_s1_short_behind_long.run(
                    url, s1_models, config, engine_config_of(engine), headers
                )
            if "s3" in names:
                results["s3"] = bench_s3_prefill_stutter.run(
                    (url, "bench-small"), (url, "bench-small-unchunked"), config, headers
                )
        finally:
            stack.stop()
    if "overhead" in names:  # a stack of its own; `serving_overhead [flags]` runs it alone
        results["overhead"] = bench_serving_overhead.run_default(base)
    for name, team_weights in (("s2", {"chat": 1.0, "batch": 1.0}), ("s9", {"team-a": 1.0, "team-b": 1.0})):
        if name not in names:
            continue
        config = measured_config(base, {"bench-small": ("small", engine)}, team_weights)
        stack, teams = start_stack(config)
        try:
            if name == "s2":
                metrics = stack.metrics_url("bench-small")
                results[name] = bench_s2_document_full_server.run(
                    stack.gateway_url, "bench-small", metrics, config, teams
                )
            else:
                results[name] = bench_s9_team_flood.run(stack.gateway_url, "bench-small", config, teams)
        finally:
            stack.stop()
    if "s5" in names:  # its backlog lives in its own blob folder: gigabytes, removed after the run
        config = bench_s5_bulk_backlog.with_blob_dir(
            measured_config(base, {"bench-small": ("small", engine)}, bench_s5_bulk_backlog.TEAMS)
        )
        stack, teams = start_stack(config)
        try:
            results["s5"] = bench_s5_bulk_backlog.run(stack, "bench-small", teams)
        finally:
            stack.stop()
            shutil.rmtree(config.blob_path, ignore_errors=True)
    for name, copies, bench in (("s4", 4, bench_s4_prefix_routing.run), ("s78", 2, bench_s7_s8_failover_drain.run)):
        if name not in names:
            continue
        config = with_copies(
            measured_config(base, {"bench-small": ("small", engine)}, {"bench": 1.0}), "bench-small", copies
        )
        stack, teams = start_stack(config)
        try:
            results[name] = bench(stack, "bench-small", teams["bench"])
        finally:
            stack.stop()
    if "grpc-door" in names:  # the door against direct Triton, on one server of its own
        config = measured_config(base, {"bench-small": ("small", engine)}, {"bench": 1.0})
        stack, teams = start_stack(config)
        try:
            door_url = f"{config.gateway.host}:{config.gateway.grpc_port}"
            triton_url = f"127.0.0.1:{config.pools['bench-small'].ports.grpc}"
            results["grpc-door"] = bench_grpc_door.run(
                door_url, triton_url, "bench-small", config, teams["bench"], http_url=stack.gateway_url
            )
        finally:
            stack.stop()
    if "sim-trust" in names:  # one server streaming every step's tokens: a stack of its own
        config = bench_sim_trust.trust_config(base)
        stack, teams = start_stack(config)
        try:
            results["sim-trust"] = bench_sim_trust.run(stack, config, teams[bench_sim_trust.POOL])
        finally:
            stack.stop()
    if "tiers" in names:  # a stack of its own: three teams entitled to tiers, one small server
        results["tiers"] = bench_tiers.run_default(base)
    return results
