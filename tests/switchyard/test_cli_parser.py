"""`switchyard`'s parser: every command names, beside its parser, a module-level function a
grep finds (no function looked up by a built string)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator

from switchyard.cli import build_parser

COMMANDS = {
    "build", "triton", "servers", "drain", "gateway", "up", "dispatcher", "plan", "gpu-check", "autoscaler",
    "load", "sim", "keys create", "keys list", "keys revoke", "usage", "batches", "batches submit",
    "batches show", "batches cancel", "batches results",
}  # fmt: skip


def commands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(name, parser) of every command under `parser`, nested ones as "keys create"."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, f"{prefix} {name}".strip())
    if prefix and parser.get_default("func") is not None:
        yield prefix, parser


def test_every_command_runs_a_function_of_its_module() -> None:
    found = dict(commands(build_parser()))
    assert set(found) == COMMANDS
    for name, parser in found.items():
        func = parser.get_default("func")
        assert "<locals>" not in func.__qualname__, name
        assert getattr(importlib.import_module(func.__module__), func.__name__) is func, name


def test_nested_commands_run_their_own_function() -> None:
    found = dict(commands(build_parser()))
    names = {name: found[name].get_default("func").__name__ for name in ("keys create", "batches show", "servers")}
    assert names == {"keys create": "keys_create", "batches show": "batches_show", "servers": "servers"}
