"""`switchyard sim SCENARIO`: a simulated day of the fleet under the autoscaler and its
baselines, side by side, with the policies we run (simulator/, docs/simulator.md).

    switchyard sim weekday                      400 GPUs, 24 h, fast mode, every policy
    switchyard sim weekday --gpus 8 --hours 1 --exact
    switchyard sim monday-9am --policies autoscaler,reactive --seed 3
    switchyard sim weekday --jobs 1             one policy after another, in this process

The policies run two at a time, each in its own process (`--jobs`); the figures are the same
for any number of processes. Writes var/sim/<scenario>/report.md (+ PNGs, summary.json). At
the brief's scale (400 GPUs, 24 h) the headline table also goes to
bench/results/sim_<scenario>.json.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from config.settings import SwitchyardConfig
from simulator.scenario import SCENARIOS

# simulator.variants.VARIANTS, spelled out so `--help` does not import the policies (a test
# keeps the two equal).
POLICY_NAMES = ("autoscaler", "reactive", "no-backfill", "static")
EXACT_GPUS_WARNING = 32  # beyond this the exact mode takes hours
# Four policies in two processes: about half the wall time of one, on a shared 2-core machine
# (docs/simulator.md, "Two modes").
DEFAULT_JOBS = 2


def add_sim_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """`sim SCENARIO` and its options, run by `sim`."""
    parser = sub.add_parser("sim", help="simulate a day of the fleet under the autoscaler and its baselines")
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--gpus", type=int, default=400, help="the fleet's GPUs at most; demand scales with it")
    parser.add_argument("--exact", action="store_true", help="every server step-level (slow: small fleets only)")
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: var/sim/SCENARIO)")
    parser.add_argument(
        "--policies", default=",".join(POLICY_NAMES), help=f"comma-separated, from {', '.join(POLICY_NAMES)}"
    )
    parser.add_argument("--cost-profile", type=Path, default=None, help="JSON step samples to fit the cost model to")
    parser.add_argument("--probe-every", type=float, default=1800.0, help="fast mode: seconds between probes")
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(DEFAULT_JOBS, os.cpu_count() or 1),
        help=f"policies run at once, each in its own process (default: {DEFAULT_JOBS}, or the CPUs if fewer);"
        " the figures are the same for any number",
    )
    parser.add_argument(
        "--reserve-fraction",
        type=float,
        default=None,
        help="the share of the pool's KV bulk leaves to people (default 0.03, a 400-GPU fleet's; "
        "switchyard.yaml's bulk.interactive_reserve_fraction is for a few CPU servers)",
    )
    parser.add_argument(
        "--bulk-lease-fraction",
        type=float,
        default=None,
        help="the share of prompt + max_tokens a bulk request leases (default: the simulator's, see "
        "docs/simulator.md; switchyard.yaml's bulk.lease_fraction is for a few CPU servers)",
    )
    parser.set_defaults(func=sim)
    return parser


def sim(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    """Run the scenario under each policy, write the report; 2 for bad arguments."""
    from report.result_files import write_result
    from simulator.cost_model import StepCostModel, load_profile
    from simulator.fluid_run import ProbeSettings

    try:
        from simulator.report import bulk_fleet_note, write_report
    except ModuleNotFoundError as exc:  # the plots' matplotlib comes with the `sim` extra
        print(f"switchyard sim: {exc}; install the simulator's extra: pip install '.[sim]'", file=sys.stderr)
        return 2
    from simulator.runner import PolicyRun, run_policies
    from simulator.scenario import BRIEF_GPUS, scenario
    from simulator.settings import SimSettings

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown or not policies or args.gpus < 1 or args.hours <= 0:
        print(f"switchyard sim: bad --policies/--gpus/--hours ({', '.join(unknown) or 'empty'})", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"switchyard sim: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    if args.exact and args.gpus > EXACT_GPUS_WARNING:
        print(f"switchyard sim: --exact with {args.gpus} GPUs steps every server: expect hours", file=sys.stderr)
    chosen = replace(scenario(args.scenario, gpus=args.gpus, hours=args.hours), startup_s=config.autoscaler.startup_s)
    settings = SimSettings(autoscaler=config.autoscaler, queue_timeout_s=config.quota.queue_timeout_s)
    if args.reserve_fraction is not None:
        if not 0.0 <= args.reserve_fraction < 1.0:
            print(f"switchyard sim: --reserve-fraction must be in [0, 1), got {args.reserve_fraction}", file=sys.stderr)
            return 2
        settings = replace(settings, reserve_fraction=args.reserve_fraction)
    if args.bulk_lease_fraction is not None:
        if not 0.0 < args.bulk_lease_fraction <= 1.0:
            print(
                f"switchyard sim: --bulk-lease-fraction must be in (0, 1], got {args.bulk_lease_fraction}",
                file=sys.stderr,
            )
            return 2
        settings = replace(settings, bulk_lease_fraction=args.bulk_lease_fraction)
    if args.cost_profile is not None:
        try:
            cost: StepCostModel = load_profile(args.cost_profile)
        except (OSError, ValueError) as exc:
            print(f"switchyard sim: {exc}", file=sys.stderr)
            return 2
        settings = replace(settings, cost=cost)
    probe = ProbeSettings(every_s=args.probe_every)
    jobs = min(args.jobs, len(policies))
    print(f"simulating {chosen.name} under {', '.join(policies)} ({jobs} at a time) ...", flush=True)

    def done(run: PolicyRun) -> None:
        print(f"  {run.name}: {run.summary.wall_s:.0f} s", flush=True)

    runs = run_policies(
        policies, chosen, settings, seed=args.seed, exact=args.exact, probe=probe, jobs=jobs, on_done=done
    )
    out = args.out if args.out is not None else config.var_path / "sim" / chosen.name
    mode = (
        "exact"
        if args.exact
        else f"fast (fluid fleet + {probe.cell}-server probes every {probe.every_s:g} s,"
        f" {probe.ramp_every_s:g} s through the morning ramp)"
    )
    notes = [bulk_fleet_note(chosen, settings)] if "no-backfill" in policies else []
    report = write_report(out, chosen, runs, seed=args.seed, mode=mode, notes=notes)
    rows = [run.summary.row() for run in runs]
    meta = {
        "scenario": chosen.name,
        "gpus": chosen.gpus,
        "hours": chosen.hours,
        "seed": args.seed,
        "mode": mode,
        "jobs": jobs,
    }
    # Only a whole run at the brief's scale is the benchmark's record.
    if chosen.gpus == BRIEF_GPUS and chosen.hours >= 24 and not args.exact and set(policies) == set(POLICY_NAMES):
        write_result(f"sim_{chosen.name.replace('-', '_')}", rows, {**meta, "report": str(report)})
    else:
        from report.result_files import format_table

        print(format_table(rows))
    print(f"report: {report}")
    return 0
