"""One line of a batch input file: checked at upload, into a request ready to POST or an error.

Two line formats, chosen when the batch is created:

    native  (batch made with a `model` form field; every line goes to /v1/generate)
        {"custom_id": "q1", "prompt": "Summarise ...", "max_tokens": 200, "temperature": 0.2}
    openai  (OpenAI's Batch API input, unchanged; every line goes to the batch's endpoint)
        {"custom_id": "q1", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "m", "messages": [...], "max_tokens": 200}}

Bodies are checked with the very pydantic models the online routes use, so a line accepted
here is a request the route accepts later. Two rules are stricter than online: `max_tokens`
is required (it is what the batch reserves KV for) and `stream: true` is refused (results
are written whole).

The context check is the part that must stay cheap: ingestion has to reach tens of thousands
of lines a second, and tokenizing a 1 KB prompt costs more than everything else together. The
tokenizers are byte-level BPE, so a prompt is at most one token per UTF-8 byte, plus BOS/EOS:

    prompt tokens  <=  len(prompt.encode()) + 2
    chat tokens    <=  sum(len(content.encode())) + 64 per message (template text) + 2

Only a line whose bound plus max_tokens exceeds the context is tokenized (chat: rendered with
the model's template first), and refused only if the real count does not fit either. The
bound (or the real count, when it was taken) plus max_tokens is the entry's `cost_tokens`:
the most KV it can hold, which is what the dispatcher leases.

Blank lines are not requests: callers skip them (see `ingest.split_lines`) before validating.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from jinja2 import TemplateError
from pydantic import BaseModel, ValidationError

from contracts.caller_echo import echoed
from contracts.catalog import ServedModel
from contracts.errors import ApiError, describe_validation_errors, field_path
from contracts.field_checks import unicode_problem
from contracts.openai_wire.chat_template import ChatMessage, TemplateRaised
from contracts.openai_wire.schemas import ChatCompletionRequest, CompletionRequest
from contracts.openai_wire.tool_calls import ToolSpec
from contracts.prompt_context import check_context, check_prompt_bytes
from contracts.schemas import FIELD_HINTS, GenerateBody

GENERATE_ENDPOINT = "/v1/generate"
COMPLETIONS_ENDPOINT = "/v1/completions"
CHAT_ENDPOINT = "/v1/chat/completions"
OPENAI_ENDPOINTS = (COMPLETIONS_ENDPOINT, CHAT_ENDPOINT)

MAX_CUSTOM_ID_CHARS = 64
# Upper bounds of a prompt's tokens beyond one per UTF-8 byte (see the module docstring).
SPECIAL_TOKENS_BOUND = 2
CHAT_MESSAGE_OVERHEAD_BYTES = 64

# A chat renderer: messages (and the tools the reply may call) to the prompt text the model sees
# (e.g. a bound `ChatTemplates.render(model, ...)`); it raises ApiError or a template error to
# refuse them.
ChatRenderer = Callable[[list[ChatMessage], list[ToolSpec]], str]

_NATIVE_FIELDS = (
    "custom_id", "prompt", "max_tokens", "stop", "temperature", "top_p", "top_k", "seed", "ignore_eos",
    "response_format",
)  # fmt: skip
_OPENAI_FIELDS = ("custom_id", "method", "url", "body")
_MAX_TOKENS_REQUIRED = f"max_tokens is required: {FIELD_HINTS['max_tokens']} (a batch reserves room for that many)"
_UTF8_BOM = b"\xef\xbb\xbf"
_Request = TypeVar("_Request", bound=BaseModel)
ErrorCode = Literal["invalid_json", "invalid_request", "context_length_exceeded"]


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """A valid line: the dispatcher POSTs `body` to `endpoint` and leases `cost_tokens` of KV."""

    line: int  # 1-based line number in the file
    custom_id: str | None
    endpoint: str
    body: dict[str, Any]  # model included; no request_id, class or stream
    cost_tokens: int  # prompt-token upper bound + max_tokens


@dataclass(frozen=True, slots=True)
class LineError:
    """An invalid line, as the batch's errors file reports it."""

    line: int
    custom_id: str | None
    code: ErrorCode
    message: str  # what is wrong and, where it can tell, which field


class _Rejected(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class LineValidator:
    """Checks the lines of one batch: one model, one format, one endpoint.

    `chat_renderer` is required for chat batches: it is only called for a conversation whose
    byte bound does not fit the context, to count its real tokens.
    """

    def __init__(
        self,
        model: ServedModel,
        fmt: Literal["native", "openai"],
        endpoint: str | None = None,
        chat_renderer: ChatRenderer | None = None,
        *,
        chat_message_overhead_bytes: int = CHAT_MESSAGE_OVERHEAD_BYTES,
    ) -> None:
        if fmt == "native" and endpoint not in (None, GENERATE_ENDPOINT):
            raise ValueError(f"native batches go to {GENERATE_ENDPOINT}, not {endpoint!r}")
        if fmt == "openai" and endpoint not in OPENAI_ENDPOINTS:
            raise ValueError(f"openai batches need an endpoint of {' or '.join(OPENAI_ENDPOINTS)}, not {endpoint!r}")
        if endpoint == CHAT_ENDPOINT and chat_renderer is None:
            raise ValueError("chat batches need a chat_renderer to check long conversations against the context")
        self.model = model
        self.fmt = fmt
        self.endpoint = GENERATE_ENDPOINT if endpoint is None else endpoint
        self._render = chat_renderer
        self._message_overhead = chat_message_overhead_bytes

    def validate(self, line_no: int, raw: bytes) -> BatchEntry | LineError:
        """Line `line_no` (its bytes, newline excluded) as an entry, or why it is not one."""
        custom_id: str | None = None
        try:
            line = _parse_object(raw)
            custom_id = _custom_id(line.get("custom_id"), required=self.fmt == "openai")
            if self.fmt == "native":
                body, cost = self._native(line)
            else:
                body, cost = self._openai(line)
        except _Rejected as rejected:
            return LineError(line_no, custom_id, rejected.code, rejected.message)
        return BatchEntry(line_no, custom_id, self.endpoint, body, cost)

    def _native(self, line: dict[str, Any]) -> tuple[dict[str, Any], int]:
        for field in line:
            if field not in _NATIVE_FIELDS:
                raise _Rejected("invalid_request", _unknown_native_field(field))
        if "max_tokens" not in line:
            raise _Rejected("invalid_request", _MAX_TOKENS_REQUIRED)
        body = {"model": self.model.model_id, **{k: v for k, v in line.items() if k != "custom_id"}}
        request = _checked(GenerateBody, body, "")
        bound = len(request.prompt.encode()) + SPECIAL_TOKENS_BOUND
        return body, self._cost(bound, request.max_tokens, lambda: request.prompt)

    def _openai(self, line: dict[str, Any]) -> tuple[dict[str, Any], int]:
        for field in line:
            if field not in _OPENAI_FIELDS:
                message = f"unknown field {echoed(field)}: a line holds {', '.join(_OPENAI_FIELDS)}"
                raise _Rejected("invalid_request", message)
        method, url, body = line.get("method"), line.get("url"), line.get("body")
        if method != "POST":
            raise _Rejected("invalid_request", f"method must be 'POST'; got {echoed(method)}")
        if url != self.endpoint:
            raise _Rejected("invalid_request", f"url must be the batch's endpoint {self.endpoint!r}; got {echoed(url)}")
        if not isinstance(body, dict):
            raise _Rejected("invalid_request", f"body must be a JSON object (the request); got {_kind(body)}")
        if body.get("stream") is True:
            raise _Rejected("invalid_request", "body.stream must not be true: batch results are written whole")
        if url == CHAT_ENDPOINT:
            cost = self._chat_cost(_checked(ChatCompletionRequest, body, "body: "))
        else:
            cost = self._completion_cost(_checked(CompletionRequest, body, "body: "))
        return {k: v for k, v in body.items() if k != "stream"}, cost

    def _completion_cost(self, request: CompletionRequest) -> int:
        self._check_model(request.model)
        max_tokens = request.completion_limit
        if max_tokens is None:  # the route would take its default; a batch must say
            raise _Rejected("invalid_request", f"body: {_MAX_TOKENS_REQUIRED}")
        bound = len(request.prompt.encode()) + SPECIAL_TOKENS_BOUND
        return self._cost(bound, max_tokens, lambda: request.prompt)

    def _chat_cost(self, request: ChatCompletionRequest) -> int:
        self._check_model(request.model)
        max_tokens = request.completion_limit
        if max_tokens is None:
            raise _Rejected("invalid_request", f"body: {_MAX_TOKENS_REQUIRED}; max_completion_tokens may stand for it")
        content = sum(len(m.text.encode()) for m in request.messages)
        bound = content + self._message_overhead * len(request.messages) + SPECIAL_TOKENS_BOUND
        return self._cost(bound, max_tokens, lambda: self._rendered(request))

    def _rendered(self, request: ChatCompletionRequest) -> str:
        assert self._render is not None, "the constructor requires a renderer for chat batches"
        try:
            prompt = self._render(request.template_messages(), request.shown_tools)
        except ApiError as exc:
            raise _Rejected("invalid_request", f"body.messages: {exc.message}") from None
        except (TemplateRaised, TemplateError, TypeError, ValueError) as exc:
            raise _Rejected("invalid_request", f"body.messages: the chat template refused them ({exc})") from None
        if not prompt:
            raise _Rejected("invalid_request", "body.messages: the chat template rendered them as nothing")
        return prompt

    def _cost(self, bound: int, max_tokens: int, prompt: Callable[[], str]) -> int:
        """`bound + max_tokens` when that fits the context; else the real count, if it fits
        (a prompt too long in bytes to fit is refused untokenized)."""
        if bound + max_tokens <= self.model.max_context_tokens:
            return bound + max_tokens
        text = prompt()
        try:
            check_prompt_bytes(self.model, text)
            prompt_tokens = self.model.count_tokens(text)
            check_context(self.model, prompt_tokens, max_tokens)
        except ApiError as exc:
            raise _Rejected("context_length_exceeded", exc.message) from None
        return prompt_tokens + max_tokens

    def _check_model(self, model_id: str) -> None:
        if model_id != self.model.model_id:
            raise _Rejected(
                "invalid_request",
                f"body.model must be the batch's model {self.model.model_id!r}; got {echoed(model_id)}",
            )


def _parse_object(raw: bytes) -> dict[str, Any]:
    if raw.startswith(_UTF8_BOM):  # Windows tools write one at the start of a file
        raw = raw[len(_UTF8_BOM) :]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Rejected("invalid_json", f"line is not UTF-8 text (bad byte at offset {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise _Rejected("invalid_json", f"line is not valid JSON: {exc.msg} (column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:
        raise _Rejected("invalid_json", f"line is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise _Rejected("invalid_json", f"line must be one JSON object; got {_kind(value)}")
    return value


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _custom_id(value: object, *, required: bool) -> str | None:
    if value is None and not required:
        return None
    if isinstance(value, str) and 1 <= len(value) <= MAX_CUSTOM_ID_CHARS:
        problem = unicode_problem(value)
        if problem is None:
            return value
        # Not kept as the line's custom_id: its error record must itself be writable UTF-8.
        raise _Rejected("invalid_request", f"custom_id must be valid Unicode text; it holds {problem}")
    rule = f"a string of 1-{MAX_CUSTOM_ID_CHARS} characters"
    if value is None:
        raise _Rejected("invalid_request", f"custom_id is required: {rule}")
    got = f"{len(value)} characters" if isinstance(value, str) else _kind(value)
    raise _Rejected("invalid_request", f"custom_id must be {rule}; got {got}")


def _checked(schema: type[_Request], body: dict[str, Any], prefix: str) -> _Request:
    try:
        return schema.model_validate(body)
    except ValidationError as exc:
        raise _Rejected("invalid_request", prefix + _describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    """The gateway's own wording, except for unknown fields, whose list of known ones would be
    the native route's and so wrong for OpenAI bodies."""
    errors = exc.errors(include_url=False)
    unknown = [".".join(field_path(e["loc"])) for e in errors if e["type"] == "extra_forbidden"]
    parts = [f"unknown field {echoed(field)}: remove it" for field in unknown]
    rest = [e for e in errors if e["type"] != "extra_forbidden"]
    if rest:
        parts.append(describe_validation_errors(rest)[0])
    return "; ".join(parts)


def _unknown_native_field(field: str) -> str:
    if field == "model":
        return "unknown field 'model': the batch sets the model for every line; remove it"
    return f"unknown field {echoed(field)}: remove it (a line holds {', '.join(_NATIVE_FIELDS)})"


def _kind(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def custom_id_of(raw: bytes) -> str | None:
    """The `custom_id` of a line that passed validation, without validating it again (for
    recording entries that expire or are cancelled unrun)."""
    try:
        line = json.loads(raw.removeprefix(_UTF8_BOM))
    except ValueError:
        return None
    custom_id = line.get("custom_id") if isinstance(line, dict) else None
    return custom_id if isinstance(custom_id, str) else None
