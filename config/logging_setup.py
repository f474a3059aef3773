"""Structured logs: one JSON object per line, from the stdlib `logging`, uvicorn's included.

    {"time": "2025-01-01T12:00:00.123Z", "level": "INFO", "logger": "gateway.generate",
     "message": "request finished", "request_id": "r1", "team": "dev", "model": "small",
     "status": 200, "duration_ms": 812.4, "ttft_ms": 41.0}

Fields come from `extra={...}` on the call and from `bind_log_fields(...)` around a request's
code (request id, team, model), so a line deep in the backend still says whose request it was.
Prompt text is never logged: the fields in `PROMPT_FIELDS` are dropped unless the gateway
runs with `SWITCHYARD_LOG_PROMPTS=1`. Pass prompt text only as such a field, never inside
the message.
"""

from __future__ import annotations

import json
import logging
import logging.config
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

LOG_PROMPTS_ENV = "SWITCHYARD_LOG_PROMPTS"
PROMPT_FIELDS = frozenset({"prompt", "messages", "prompt_text", "completion_text"})
# What every LogRecord carries: anything else on a record came from `extra=`.
_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}

# Fields bound to the running request; a ContextVar so each asyncio task sees its own.
# Held as a tuple of pairs: a ContextVar's default must not be mutable.
_bound_fields: ContextVar[tuple[tuple[str, object], ...]] = ContextVar("switchyard_log_fields", default=())


@contextmanager
def bind_log_fields(**fields: object) -> Iterator[None]:
    """Add `fields` (request_id=..., team=...) to every log line written inside the block by
    this task (and the tasks it starts)."""
    token = _bound_fields.set(tuple({**dict(_bound_fields.get()), **fields}.items()))
    try:
        yield
    finally:
        _bound_fields.reset(token)


def log_prompts_enabled(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(LOG_PROMPTS_ENV, "").strip().lower() in {"1", "true", "yes"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line; drops prompt fields unless `log_prompts`."""

    def __init__(self, log_prompts: bool = False) -> None:
        super().__init__()
        self.log_prompts = log_prompts

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_bound_fields.get())
        if record.name == "uvicorn.access":
            entry.update(_access_fields(record.args))
        entry.update((k, v) for k, v in record.__dict__.items() if k not in _RECORD_ATTRS)
        if not self.log_prompts:
            for name in PROMPT_FIELDS.intersection(entry):
                del entry[name]
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def _access_fields(args: object) -> dict[str, object]:
    """uvicorn's access line is `'%s - "%s %s HTTP/%s" %d'` % (client, method, path, version, status)."""
    if not isinstance(args, tuple) or len(args) != 5:
        return {}
    client, method, path, _, status = args
    return {"client": client, "method": method, "path": path, "status": status}


def logging_config(level: str | int = "INFO", log_prompts: bool | None = None) -> dict[str, Any]:
    """A `logging.config.dictConfig` mapping: JSON lines on stderr for the root logger and
    uvicorn's. Pass it to `uvicorn.run(log_config=...)` so every worker process uses it."""
    prompts = log_prompts_enabled() if log_prompts is None else log_prompts
    level_name = logging.getLevelName(level) if isinstance(level, int) else level.upper()
    uvicorn = {"level": level_name, "handlers": [], "propagate": True}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter", "log_prompts": prompts}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
        "root": {"level": level_name, "handlers": ["stderr"]},
        "loggers": {
            **{name: dict(uvicorn) for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
            # One line per scrape of every server's metrics, every second: only their failures.
            "httpx": {"level": "WARNING"},
        },
    }


def configure_logging(level: str | int = "INFO", log_prompts: bool | None = None) -> None:
    """Log JSON lines from this process (prompts only with `SWITCHYARD_LOG_PROMPTS=1`): what
    the entry points of the dispatcher and the autoscaler call first. The gateway hands
    `logging_config()` to uvicorn instead, which applies it in every worker process."""
    logging.config.dictConfig(logging_config(level, log_prompts))
