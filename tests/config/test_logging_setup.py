"""JSON log lines: fields from `extra` and from the bound request context, uvicorn's access
lines parsed, and prompt text dropped unless SWITCHYARD_LOG_PROMPTS=1."""

from __future__ import annotations

import json
import logging
import logging.config
from typing import Any

from config.logging_setup import JsonFormatter, bind_log_fields, log_prompts_enabled, logging_config


def emit(
    formatter: JsonFormatter, name: str = "gateway.test", msg: str = "done", args: Any = (), **extra: object
) -> Any:
    record = logging.LogRecord(name, logging.INFO, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return json.loads(formatter.format(record))


def test_a_line_carries_bound_and_extra_fields() -> None:
    formatter = JsonFormatter()
    with bind_log_fields(request_id="r-1", team="alpha"):
        with bind_log_fields(model="small"):
            line = emit(formatter, status=200, duration_ms=12.5)
        outside = emit(formatter)
    assert line["level"] == "INFO" and line["logger"] == "gateway.test" and line["message"] == "done"
    assert line["time"].endswith("Z")
    assert {k: line[k] for k in ("request_id", "team", "model", "status", "duration_ms")} == {
        "request_id": "r-1",
        "team": "alpha",
        "model": "small",
        "status": 200,
        "duration_ms": 12.5,
    }
    assert "model" not in outside and outside["request_id"] == "r-1"
    assert "request_id" not in emit(formatter)


def test_prompt_text_only_when_asked() -> None:
    assert "prompt" not in emit(JsonFormatter(), prompt="my secret document", request_id="r-2")
    assert emit(JsonFormatter(log_prompts=True), prompt="my secret document")["prompt"] == "my secret document"
    assert log_prompts_enabled({"SWITCHYARD_LOG_PROMPTS": "1"})
    assert not log_prompts_enabled({})
    assert logging_config("info", log_prompts=None)["formatters"]["json"]["log_prompts"] is False


def test_uvicorn_access_lines_become_fields() -> None:
    args = ("127.0.0.1:5000", "GET", "/v1/usage?team=a", "1.1", 403)
    line = emit(JsonFormatter(), name="uvicorn.access", msg='%s - "%s %s HTTP/%s" %d', args=args)
    assert (line["method"], line["path"], line["status"]) == ("GET", "/v1/usage?team=a", 403)


def test_logging_config_routes_uvicorn_through_the_json_handler() -> None:
    config = logging_config(logging.DEBUG)
    assert config["root"] == {"level": "DEBUG", "handlers": ["stderr"]}
    assert config["loggers"]["uvicorn.access"]["propagate"] is True
    root = logging.getLogger()
    saved = root.level, root.handlers[:]
    logging.config.dictConfig(config)
    try:
        (handler,) = root.handlers
        assert isinstance(handler.formatter, JsonFormatter)
        assert not logging.getLogger("uvicorn.access").handlers
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        root.setLevel(saved[0])
        for handler in saved[1]:
            root.addHandler(handler)
