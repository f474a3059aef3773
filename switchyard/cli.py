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

Each subcommand's parser names the function it runs (`set_defaults(func=...)`, beside the
parser, here or in its `*_commands` module), so a grep for a command's function finds its
caller. The command modules import their heavy dependencies inside the commands, so
`switchyard --help` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from config.environment import SwitchyardEnvironment
from config.settings import SwitchyardConfig, load_config
from switchyard.autoscaler_commands import add_autoscaler_parser
from switchyard.batch_commands import add_batch_parsers
from switchyard.gpu_check import add_gpu_check_parser
from switchyard.load_commands import add_load_parser
from switchyard.plan_commands import add_plan_parser
from switchyard.quota_commands import add_quota_parsers
from switchyard.server_commands import add_server_parsers
from switchyard.sim_commands import add_sim_parser


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
            where = "inside llm" if serving.target == "cpu" and pool.engine_in_process else f"model {engine.template}"
            print(f"pool {pool_id}: model repository at {path} (engine {where})")
            if serving.target == "trtllm" and serving.trtllm_engine == "legacy":
                script = write_build_script(config, pool.model_id, pool_plan(config, pool_id))
                print(f"pool {pool_id}: build its TensorRT engine on a GPU host with {script}")
    except ValueError as exc:  # the plan does not fit the GPU, or a model.yaml key the pin refuses
        print(f"switchyard build: {exc}", file=sys.stderr)
        return 2
    return 0


def _cmd_triton(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    from config.settings import Ports
    from server_host.server_process import run_triton

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
        register_host=args.register_host, epoch=args.epoch, triton_root=SwitchyardEnvironment().triton_root,
    )  # fmt: skip


def _cmd_gateway(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    from gateway.server import serve

    serve(config, host=args.host, port=args.port)
    return 0


def _cmd_up(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    from stack.local_stack import GATEWAY_WORKERS, run_stack

    workers = SwitchyardEnvironment().workers or GATEWAY_WORKERS
    return run_stack(config, gateway_port=args.port or config.gateway.port, gateway_workers=workers)


def _cmd_dispatcher(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    import asyncio

    from bulk.service import serve_dispatcher
    from config.logging_setup import configure_logging

    configure_logging()
    environment = SwitchyardEnvironment()
    url = args.gateway_url or environment.gateway_url
    asyncio.run(serve_dispatcher(config, gateway_url=url, admin_key=environment.admin_key))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=None, help="path to switchyard.yaml")
    sub = parser.add_subparsers(dest="command", required=True)

    add_quota_parsers(sub)
    build = sub.add_parser("build", help="build models and fill Triton model repositories")
    build.add_argument("--model", help="build only this model (default: all)")
    build.add_argument("--target", choices=("cpu", "trtllm"), help="the engine behind llm (default: serving.target)")
    build.add_argument(
        "--engine",
        choices=("llmapi", "legacy"),
        help=(
            "on trtllm: the LLM API (the GPU path), or LEGACY TensorRT engines, only while the pinned "
            "TensorRT-LLM release has them (default: serving.trtllm_engine)"
        ),
    )
    build.set_defaults(func=_cmd_build)

    triton = sub.add_parser("triton", help="run one pool's Triton server (SIGTERM drains it, SIGINT stops it)")
    triton.add_argument("--pool", required=True)
    triton.add_argument("--copy", type=int, default=0, help="which copy: listens on the pool's ports + 10·COPY")
    triton.add_argument("--server-id", default=None, help="its id in the registry (marked draining on SIGTERM)")
    triton.add_argument("--ports", default=None, help="HTTP,GRPC,METRICS instead of the copy's ports")
    triton.add_argument("--no-fill", action="store_true", help="serve the model repository as it is")
    triton.add_argument(
        "--epoch", type=int, default=None, help="its registration's epoch (given by its supervisor: fencing)"
    )
    triton.add_argument(
        "--register-host",
        default=None,
        help="register and heartbeat this server itself at HOST (no supervisor: a Kubernetes pod's IP)",
    )
    triton.set_defaults(func=_cmd_triton)

    add_server_parsers(sub)

    gateway = sub.add_parser("gateway", help="run the HTTP gateway")
    gateway.add_argument("--host", default=None)
    gateway.add_argument("--port", type=int, default=None)
    gateway.set_defaults(func=_cmd_gateway)

    up = sub.add_parser("up", help="run the whole platform until Ctrl-C")
    up.add_argument("--port", type=int, default=None, help="gateway port (default from config)")
    up.set_defaults(func=_cmd_up)

    dispatcher = sub.add_parser("dispatcher", help="run the bulk dispatcher (releases batch entries onto spare room)")
    dispatcher.add_argument(
        "--gateway-url",
        default=None,
        help="gateway to submit through (default: $SWITCHYARD_GATEWAY_URL, else the config's)",
    )
    dispatcher.set_defaults(func=_cmd_dispatcher)

    add_plan_parser(sub)
    add_gpu_check_parser(sub)
    add_autoscaler_parser(sub)
    add_load_parser(sub)
    add_sim_parser(sub)
    add_batch_parsers(sub)
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
