"""`switchyard batches ...`: a team's batches through the gateway's HTTP API.

    switchyard batches                                   the team's batches with progress bars
    switchyard batches submit FILE --model M --deadline 6h    upload, then follow progress
    switchyard batches show ID | cancel ID | results ID [--errors]

The key: `--key`, else `SWITCHYARD_API_KEY`, else the first team's key file that `make up` writes
(var/keys/<team>-api-key).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bulk.progress import eta_text, progress_bar
from config.environment import SwitchyardEnvironment, variable_name
from config.settings import SwitchyardConfig
from quota.key_files import default_key_path, read_key_file

API_KEY_ENV = variable_name(SwitchyardEnvironment, "api_key")
_ENDED = {"completed", "expired", "cancelled", "failed"}


def _client(config: SwitchyardConfig, args: argparse.Namespace) -> httpx.Client:
    path = default_key_path(config.var_path, config.teams)
    key = getattr(args, "key", None) or SwitchyardEnvironment().api_key or (read_key_file(path) if path else None)
    if not key:
        raise SystemExit(
            f"no API key: pass --key, set {API_KEY_ENV}, or run `make up` (writes {path or 'a key per team'})"
        )
    url = getattr(args, "url", None) or f"http://{config.gateway.host}:{config.gateway.port}"
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=httpx.Timeout(30.0))


def _checked(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text
        raise SystemExit(f"HTTP {response.status_code}: {message}")
    return response.json()


def progress_line(batch: dict[str, Any]) -> str:
    counts = batch["counts"]
    bar = progress_bar(counts["done"], counts["failed"], counts["expired"], counts["total"])
    risk = "  AT RISK" if batch.get("at_risk") else ""
    return (
        f"{batch['id']}  {batch['status']:<11} {bar}  done {counts['done']} failed {counts['failed']} "
        f"expired {counts['expired']} pending {counts['pending']} / {counts['total']}  "
        f"eta {eta_text(batch.get('eta_s'))}{risk}"
    )


def batches_list(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    with _client(config, args) as client:
        batches = _checked(client.get("/v1/batches", params={"limit": args.limit}))["data"]
    if not batches:
        print("no batches yet: switchyard batches submit FILE --model MODEL")
    for batch in batches:
        print(f"{progress_line(batch)}  model {batch['model']}  deadline {batch['deadline']}")
    return 0


def batches_submit(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        print(f"no such file: {path}", file=sys.stderr)
        return 2
    with _client(config, args) as client, path.open("rb") as file:
        data = {"model": args.model, **({"deadline": args.deadline} if args.deadline else {})}
        batch = _checked(
            client.post("/v1/batches", data=data, files={"file": (path.name, file, "application/jsonl")}, timeout=None)
        )
        print(f"batch {batch['id']}: {batch['counts']['total']} requests, {batch['counts']['failed']} refused lines")
        if args.no_follow:
            return 0
        return _follow(client, batch["id"], args.interval)


def _follow(client: httpx.Client, batch_id: str, interval_s: float) -> int:
    tty = sys.stdout.isatty()
    while True:
        batch = _checked(client.get(f"/v1/batches/{batch_id}"))
        line = progress_line(batch)
        print(f"\r{line}" if tty else line, end="" if tty else "\n", flush=True)
        if batch["status"] in _ENDED:
            if tty:
                print()
            print(f"results: {batch['links']['results']}   errors: {batch['links']['errors']}")
            return 0 if batch["status"] == "completed" else 1
        time.sleep(interval_s)


def batches_show(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    with _client(config, args) as client:
        print(progress_line(_checked(client.get(f"/v1/batches/{args.batch_id}"))))
    return 0


def batches_cancel(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    with _client(config, args) as client:
        print(progress_line(_checked(client.post(f"/v1/batches/{args.batch_id}/cancel"))))
    return 0


def batches_results(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    kind = "errors" if args.errors else "results"
    with _client(config, args) as client, client.stream("GET", f"/v1/batches/{args.batch_id}/{kind}") as reply:
        if reply.status_code >= 400:
            reply.read()
            _checked(reply)
        for chunk in reply.iter_bytes():
            sys.stdout.buffer.write(chunk)
    sys.stdout.flush()
    return 0


def add_batch_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`batches` and its subcommands, each run by the `batches_*` function of this module."""
    # --key and --url work before or after the subcommand (SUPPRESS: an absent one overwrites nothing).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--key", default=argparse.SUPPRESS, help=f"a team's API key (default: ${API_KEY_ENV})")
    common.add_argument("--url", default=argparse.SUPPRESS, help="gateway URL (default from config)")
    batches = sub.add_parser("batches", parents=[common], help="list, submit, follow and cancel batches")
    batches.add_argument("--limit", type=int, default=20)
    batches.set_defaults(func=batches_list)
    batches_sub = batches.add_subparsers(dest="batches_command")
    submit = batches_sub.add_parser("submit", parents=[common], help="upload a JSONL file and follow its progress")
    submit.add_argument("file")
    submit.add_argument("--model", required=True)
    submit.add_argument("--deadline", default=None, help="a duration (6h, 90m) or an RFC 3339 time; default 24h")
    submit.add_argument("--no-follow", action="store_true", help="print the batch id and return")
    submit.add_argument("--interval", type=float, default=2.0, help="seconds between progress updates")
    submit.set_defaults(func=batches_submit)
    show = batches_sub.add_parser("show", parents=[common], help="one batch's progress")
    show.add_argument("batch_id")
    show.set_defaults(func=batches_show)
    cancel = batches_sub.add_parser("cancel", parents=[common], help="cancel a batch")
    cancel.add_argument("batch_id")
    cancel.set_defaults(func=batches_cancel)
    results = batches_sub.add_parser("results", parents=[common], help="print a batch's results (JSONL)")
    results.add_argument("batch_id")
    results.add_argument("--errors", action="store_true", help="the errors file instead")
    results.set_defaults(func=batches_results)
