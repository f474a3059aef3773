"""`switchyard`: the one command-line entry point.

    switchyard build [--model ID] [--target cpu|trtllm] [--engine llmapi|legacy]
                                      build the models and fill each pool's Triton repository
    switchyard triton --pool POOL     run one pool's Triton server in the foreground (SIGTERM drains it)
    switchyard gateway                run the HTTP gateway in the foreground
    switchyard up                     the whole platform: Redis, supervised Triton servers, gateway
    switchyard servers [--pool POOL]  every registered server: state, ports, KV use, requests
    switchyard drain SERVER           finish a server's requests, then stop it (not restarted)
    switchyard keys create TEAM       a new API key for TEAM, printed once (also: list, revoke)
    switchyard usage [--since 24h]    usage per team, model and class
    switchyard dispatcher             run the bulk dispatcher in the foreground
    switchyard plan MODEL             KV bytes per token, tokens and requests per GPU, engine sizes
    switchyard gpu-check              on a GPU host: build small on TensorRT-LLM, run S1, S3, S4
    switchyard autoscaler [--actuator supervisor|kubernetes]  scale each pool ahead of demand
    switchyard load --ramp "0:1,60:6,180:6,240:1" [--rehearse]  a scripted load: TTFT, errors, cuts
    switchyard sim SCENARIO           a simulated day of the fleet (weekday, monday-9am, failures, flash-crowd)
    switchyard batches [submit FILE --model M --deadline 6h | show | cancel | results]

Each subcommand imports what it needs when it runs, so `switchyard --help` stays instant.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

from config.settings import SwitchyardConfig, load_config


def _cmd_build(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    from build_engines.build import build_model
    from build_engines.legacy_engine import write_build_script
    from build_engines.llm_api_args import pool_plan
    from build_engines.repository import engine_model, fill_repository
    from config.settings import ServingSpec

    serving = ServingSpec(
        target=args.target or config.serving.target, trtllm_engine=args.engine or config.serving.trtllm_engine
    )
    config = config.model_copy(update={"serving": serving})
    model_ids = [args.model] if args.model else list(config.models)
    for model_id in model_ids:
        if model_id not in config.models:
            print(f"unknown model {model_id!r}; configured: {', '.join(config.models)}", file=sys.stderr)
            return 2
        build_model(model_id, config.models[model_id], config.model_dir(model_id))
    engine = engine_model(serving)
    try:
        for pool_id, pool in config.pools.items():
            if pool.model_id not in model_ids:
                continue
            path = fill_repository(config, pool_id)
            print(f"pool {pool_id}: model repository at {path} (engine model {engine.template})")
            if serving.target == "trtllm" and serving.trtllm_engine == "legacy":
                script = write_build_script(config, pool.model_id, pool_plan(config, pool_id))
                print(f"pool {pool_id}: build its TensorRT engine on a GPU host with {script}")
    except ValueError as exc:  # the plan does not fit the GPU, or a model.yaml key the pin refuses
        print(f"switchyard build: {exc}", file=sys.stderr)
        return 2
    return 0


def _cmd_triton(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    from config.settings import Ports
    from fleet.launch.server_process import run_triton

    if args.pool not in config.pools:
        print(f"unknown pool {args.pool!r}; configured: {', '.join(config.pools)}", file=sys.stderr)
        return 2
    ports = None
    if args.ports is not None:
        try:
            http, grpc, metrics = (int(port) for port in args.ports.split(","))
            ports = Ports(http=http, grpc=grpc, metrics=metrics)
        except ValueError:
            print(f"--ports wants HTTP,GRPC,METRICS port numbers, got {args.ports!r}", file=sys.stderr)
            return 2
    if args.register_host and not args.server_id:
        print("--register-host needs --server-id", file=sys.stderr)
        return 2
    return run_triton(
        config, args.pool, ports, copy=args.copy, server_id=args.server_id, fill=not args.no_fill,
        register_host=args.register_host,
    )  # fmt: skip


def _cmd_gateway(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    from gateway.server import serve

    serve(config, host=args.host, port=args.port)
    return 0


def _cmd_up(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    from fleet.stack import run_stack

    return run_stack(config, gateway_port=args.port or config.gateway.port)


def _cmd_dispatcher(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    import asyncio
    import logging.config

    from bulk.service import serve_dispatcher
    from config.logging_setup import logging_config

    logging.config.dictConfig(logging_config("INFO"))
    asyncio.run(serve_dispatcher(config, gateway_url=args.gateway_url))
    return 0


def _lazy(module: str, name: str) -> Callable[[SwitchyardConfig, argparse.Namespace], int]:
    """The function `name` of `switchyard.<module>` as a subcommand, imported only when it runs."""

    def run(config: SwitchyardConfig, args: argparse.Namespace) -> int:
        result: int = getattr(importlib.import_module(f"switchyard.{module}"), name)(config, args)
        return result

    return run


def _add_quota_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = sub.add_parser("keys", help="create, list and revoke API keys (stored hashed in Redis)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="make a key for TEAM and print it once")
    create.add_argument("team")
    create.set_defaults(func=_lazy("quota_commands", "keys_create"))
    keys_sub.add_parser("list", help="team and hash prefix of every key").set_defaults(
        func=_lazy("quota_commands", "keys_list")
    )
    revoke = keys_sub.add_parser("revoke", help="forget the key whose hash starts with PREFIX")
    revoke.add_argument("prefix")
    revoke.set_defaults(func=_lazy("quota_commands", "keys_revoke"))

    usage = sub.add_parser("usage", help="print usage per team, model and class")
    usage.add_argument("--team", default=None, help="one team (default: all)")
    usage.add_argument("--since", default="24h", help="a duration (24h, 7d) or an ISO time (default 24h)")
    usage.add_argument("--hourly", action="store_true", help="one row per hour")
    usage.set_defaults(func=_lazy("quota_commands", "usage"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=None, help="path to switchyard.yaml")
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="build models and fill Triton model repositories")
    build.add_argument("--model", help="build only this model (default: all)")
    build.add_argument("--target", choices=("cpu", "trtllm"), help="the engine behind llm (default: serving.target)")
    build.add_argument(
        "--engine",
        choices=("llmapi", "legacy"),
        help="on trtllm: the LLM API, or TensorRT engines for TensorRT-LLM <= 1.2 (default: serving.trtllm_engine)",
    )
    build.set_defaults(func=_cmd_build)

    triton = sub.add_parser("triton", help="run one pool's Triton server (SIGTERM drains it, SIGINT stops it)")
    triton.add_argument("--pool", required=True)
    triton.add_argument("--copy", type=int, default=0, help="which copy: listens on the pool's ports + 10·COPY")
    triton.add_argument("--server-id", default=None, help="its id in the registry (marked draining on SIGTERM)")
    triton.add_argument("--ports", default=None, help="HTTP,GRPC,METRICS instead of the copy's ports")
    triton.add_argument("--no-fill", action="store_true", help="serve the model repository as it is")
    triton.add_argument(
        "--register-host",
        default=None,
        help="register and heartbeat this server itself at HOST (no supervisor: a Kubernetes pod's IP)",
    )
    triton.set_defaults(func=_cmd_triton)

    servers = sub.add_parser("servers", help="list the registered servers with their load")
    servers.add_argument("--pool", default=None)
    servers.set_defaults(func=_lazy("server_commands", "servers"))
    drain = sub.add_parser("drain", help="drain a server: no new requests, finish the running ones, stop")
    drain.add_argument("server_id", metavar="SERVER")
    drain.set_defaults(func=_lazy("server_commands", "drain"))

    gateway = sub.add_parser("gateway", help="run the HTTP gateway")
    gateway.add_argument("--host", default=None)
    gateway.add_argument("--port", type=int, default=None)
    gateway.set_defaults(func=_cmd_gateway)

    up = sub.add_parser("up", help="run the whole platform until Ctrl-C")
    up.add_argument("--port", type=int, default=None, help="gateway port (default from config)")
    up.set_defaults(func=_cmd_up)

    dispatcher = sub.add_parser("dispatcher", help="run the bulk dispatcher (releases batch entries onto spare room)")
    dispatcher.add_argument("--gateway-url", default=None, help="gateway to submit through (default from config)")
    dispatcher.set_defaults(func=_cmd_dispatcher)

    from switchyard.plan_commands import add_plan_parser

    add_plan_parser(sub).set_defaults(func=_lazy("plan_commands", "plan"))
    from switchyard.gpu_check import add_gpu_check_parser

    add_gpu_check_parser(sub).set_defaults(func=_lazy("gpu_check", "gpu_check"))
    from switchyard.autoscaler_commands import add_autoscaler_parser

    add_autoscaler_parser(sub).set_defaults(func=_lazy("autoscaler_commands", "autoscaler"))
    from switchyard.load_commands import add_load_parser

    add_load_parser(sub).set_defaults(func=_lazy("load_commands", "load"))
    from switchyard.sim_commands import add_sim_parser

    add_sim_parser(sub).set_defaults(func=_lazy("sim_commands", "sim"))

    _add_quota_parsers(sub)
    from switchyard.batch_commands import add_batch_parsers

    add_batch_parsers(sub, functools.partial(_lazy, "batch_commands"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config)
    except (OSError, ValueError) as exc:
        print(f"switchyard: cannot load config: {exc}", file=sys.stderr)
        return 2
    result: int = args.func(config, args)
    return result


if __name__ == "__main__":
    sys.exit(main())
