"""`switchyard autoscaler`: the fleet autoscaler in the foreground (docs/autoscaler.md).

    switchyard autoscaler --actuator kubernetes [--namespace NS]
        sets each pool's Deployment replicas (`triton-<pool>`); in a pod it uses its service
        account (deploy/base/autoscaler.yaml), elsewhere the current kubeconfig context
    switchyard autoscaler --actuator supervisor
        runs the pools' servers itself (as `switchyard up` does, without the gateway) and scales
        them: a host that serves pools for a gateway running elsewhere

`switchyard up` runs the autoscaler by itself when `autoscaler.enabled` is set. Ctrl-C or
SIGTERM stops it after the pass in progress (servers it started are stopped too).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import TYPE_CHECKING

from config.settings import SwitchyardConfig

if TYPE_CHECKING:
    from autoscaler.live import LiveOptions


def add_autoscaler_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """`autoscaler` and its options, run by `autoscaler`."""
    parser = sub.add_parser("autoscaler", help="scale each pool's servers ahead of demand (docs/autoscaler.md)")
    parser.add_argument("--actuator", choices=("supervisor", "kubernetes"), default="supervisor")
    parser.add_argument("--pool", action="append", default=None, help="a pool to scale (repeat; default: all)")
    parser.add_argument("--namespace", default=None, help="kubernetes: the Deployments' namespace (default: own)")
    parser.add_argument(
        "--gateway-metrics",
        action="append",
        default=None,
        help="a gateway /metrics URL for time to first token (repeat; default: the configured gateway's)",
    )
    parser.add_argument("--avg-request-tokens", type=int, default=None, help="prompt + reply (default 2,300)")
    parser.add_argument("--avg-request-s", type=float, default=None, help="seconds a request holds a seat (10)")
    parser.add_argument("--bulk-tokens-per-entry", type=int, default=None, help="a batch entry's tokens (2,300)")
    parser.set_defaults(func=autoscaler)
    return parser


def autoscaler(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    from config.logging_setup import configure_logging

    configure_logging()
    pool_ids = args.pool or [p for p, pool in config.pools.items() if pool.copies_limit > 0]
    unknown = [p for p in pool_ids if p not in config.pools]
    if unknown:
        print(f"unknown pools {', '.join(unknown)}; configured: {', '.join(config.pools)}", file=sys.stderr)
        return 2
    try:
        options = _options(config, args)
    except ValueError as exc:
        print(f"switchyard autoscaler: {exc}", file=sys.stderr)
        return 2
    if args.actuator == "kubernetes":
        return _run_kubernetes(config, pool_ids, options, args.namespace)
    return _run_supervisor(config, pool_ids, options)


def _options(config: SwitchyardConfig, args: argparse.Namespace) -> LiveOptions:
    from autoscaler.live import LiveOptions

    host = "127.0.0.1" if config.gateway.host in ("0.0.0.0", "::") else config.gateway.host
    urls = args.gateway_metrics or [f"http://{host}:{config.gateway.port}/metrics"]
    given = (args.avg_request_tokens, args.avg_request_s, args.bulk_tokens_per_entry)
    if any(value is not None and value <= 0 for value in given):
        raise ValueError("request averages must be positive")
    return LiveOptions(
        avg_request_tokens=args.avg_request_tokens,
        avg_request_s=args.avg_request_s,
        bulk_tokens_per_entry=args.bulk_tokens_per_entry,
        gateway_metrics_urls=tuple(urls),
    )


def _run_kubernetes(config: SwitchyardConfig, pool_ids: list[str], options: LiveOptions, namespace: str | None) -> int:
    try:
        from kubernetes.config import ConfigException
    except ModuleNotFoundError as exc:
        print(f"switchyard autoscaler: {exc}; install the extra: pip install '.[kubernetes]'", file=sys.stderr)
        return 2

    from autoscaler.kubernetes_actuator import KubernetesActuator
    from autoscaler.live import serve_autoscaler

    try:
        actuator = KubernetesActuator.from_environment(namespace)
    except (ConfigException, OSError) as exc:
        print(f"switchyard autoscaler: no Kubernetes cluster to talk to ({exc}); in a pod it uses its "
              "service account, elsewhere the kubeconfig's current context", file=sys.stderr)  # fmt: skip
        return 2

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve_autoscaler(config, actuator, pool_ids, stop, options)

    asyncio.run(main())
    return 0


def _run_supervisor(config: SwitchyardConfig, pool_ids: list[str], options: LiveOptions) -> int:
    from autoscaler.actuators import SupervisorActuator
    from autoscaler.autoscaler_thread import AutoscalerThread
    from server_host.ports import ConfiguredPorts
    from server_host.signals import stop_on_signals
    from server_host.triton_server import TritonStartError
    from supervisor.supervisor_thread import SupervisorThread

    supervisor = SupervisorThread(config, ConfiguredPorts(config), pool_ids=pool_ids)
    with stop_on_signals() as stop:
        try:
            supervisor.start()
        except (TritonStartError, RuntimeError) as exc:
            print(f"switchyard autoscaler: the servers did not start: {exc}", file=sys.stderr)
            return 1
        scaler = AutoscalerThread(config, SupervisorActuator(supervisor), pool_ids, options)
        try:
            scaler.start()
            while not stop.wait(1.0):
                if not (scaler.alive() and supervisor.alive()):
                    print("switchyard autoscaler: a part stopped (see the log above)", file=sys.stderr)
                    return 1
            return 0
        finally:
            scaler.stop()
            supervisor.stop()
