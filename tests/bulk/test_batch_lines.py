"""One batch line to an entry or an error: both formats, exact bodies and costs, the context
check that tokenizes only when the byte bound does not fit, and messages that name the field."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from tokenizers import Tokenizer

from build_engines.corpus import generate_corpus
from build_engines.tokenizer import LLAMA_CHAT_TEMPLATE, train_tokenizer
from bulk.batch_lines import BatchEntry, LineError, LineValidator
from contracts.catalog import ServedModel
from contracts.openai_wire.chat_template import ChatMessage, ChatTemplate
from contracts.openai_wire.tool_calls import ToolSpec

CONTEXT = 512
LONG_PROMPT = "the quick brown fox jumps over the lazy dog " * 9  # 396 bytes, far fewer tokens


@dataclass(frozen=True, slots=True)
class CountingModel(ServedModel):
    """A served model that records each text it tokenizes."""

    counted: list[str] = field(default_factory=list)

    def count_tokens(self, text: str) -> int:
        self.counted.append(text)
        return ServedModel.count_tokens(self, text)


class RecordingRenderer:
    """The Llama 2 template, recording each conversation it renders."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.template = ChatTemplate(LLAMA_CHAT_TEMPLATE, {"bos_token": "<s>", "eos_token": "</s>"}, True)
        self.calls: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()) -> str:
        self.calls.append(list(messages))
        return self.template.render(messages, tools)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(generate_corpus(5, 300), 300)


@pytest.fixture
def model(tokenizer: Tokenizer) -> CountingModel:
    return CountingModel("m", CONTEXT, tokenizer)


@pytest.fixture
def renderer(tokenizer: Tokenizer) -> RecordingRenderer:
    return RecordingRenderer(tokenizer)


def _line(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _error(outcome: BatchEntry | LineError) -> LineError:
    assert isinstance(outcome, LineError), outcome
    return outcome


# --- native lines --------------------------------------------------------------------------


def test_native_line_becomes_a_generate_body(model: CountingModel) -> None:
    validator = LineValidator(model, "native")
    raw = _line({"custom_id": "q1", "prompt": "héllo", "max_tokens": 20, "temperature": 0.5, "stop": "\n"})
    entry = validator.validate(7, raw)
    assert entry == BatchEntry(
        line=7,
        custom_id="q1",
        endpoint="/v1/generate",
        body={"model": "m", "prompt": "héllo", "max_tokens": 20, "temperature": 0.5, "stop": "\n"},
        cost_tokens=len("héllo".encode()) + 2 + 20,
    )
    assert model.counted == []  # the bound fits: nothing tokenized


def test_native_optional_fields_and_no_custom_id(model: CountingModel) -> None:
    fields = {"stop": ["a", "b"], "top_p": 0.9, "top_k": 5, "seed": -3, "ignore_eos": True}
    entry = LineValidator(model, "native").validate(1, _line({"prompt": "p", "max_tokens": 1, **fields}))
    assert isinstance(entry, BatchEntry)
    assert entry.custom_id is None
    assert entry.body == {"model": "m", "prompt": "p", "max_tokens": 1, **fields}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"prompt": "p", "max_tokens": 1, "temprature": 1}, "unknown field 'temprature': remove it"),
        ({"prompt": "p", "max_tokens": 1, "stream": True}, "unknown field 'stream'"),
        ({"prompt": "p", "max_tokens": 1, "model": "m"}, "the batch sets the model for every line"),
        ({"prompt": "p"}, "max_tokens is required"),
        ({"prompt": "p", "max_tokens": 0}, "'max_tokens' must be an integer >= 1"),
        ({"prompt": "p", "max_tokens": "5"}, "'max_tokens' must be an integer >= 1"),
        ({"prompt": "", "max_tokens": 5}, "'prompt' must be a non-empty string"),
        ({"max_tokens": 5}, "'prompt' is required"),
        ({"prompt": "p", "max_tokens": 5, "temperature": 3.0}, "'temperature' must be a number from 0 to 2"),
        ({"prompt": "\ud800", "max_tokens": 5}, "unable to parse raw data as a unicode string"),  # lone surrogate
    ],
)
def test_native_invalid_requests_name_the_field(model: CountingModel, line: dict[str, Any], message: str) -> None:
    error = _error(LineValidator(model, "native").validate(3, _line({"custom_id": "c", **line})))
    assert (error.line, error.custom_id, error.code) == (3, "c", "invalid_request")
    assert message in error.message


@pytest.mark.parametrize(
    ("custom_id", "message"),
    [(5, "custom_id must be a string of 1-64 characters; got a number"), ("x" * 65, "got 65 characters"), ("", "")],
)
def test_native_custom_id_rules(model: CountingModel, custom_id: object, message: str) -> None:
    error = _error(LineValidator(model, "native").validate(1, _line({"custom_id": custom_id, "prompt": "p"})))
    assert error.code == "invalid_request" and error.custom_id is None
    assert "custom_id must be a string of 1-64 characters" in error.message and message in error.message


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"prompt": "p", "max_tokens": 1', "line is not valid JSON: Expecting ',' delimiter (column 32)"),
        (b'["prompt", "p"]', "line must be one JSON object; got an array"),
        (b'"text"', "got a string"),
        (b'{"prompt": "\xff", "max_tokens": 1}', "line is not UTF-8 text (bad byte at offset 12)"),
        (b'{"prompt": "p", "max_tokens": 1, "temperature": NaN}', "NaN is not a JSON number"),
        (b"[" * 100_000, "line is not valid JSON"),
    ],
)
def test_lines_that_are_not_json_objects(model: CountingModel, raw: bytes, message: str) -> None:
    error = _error(LineValidator(model, "native").validate(9, raw))
    assert (error.line, error.custom_id, error.code) == (9, None, "invalid_json")
    assert message in error.message


def test_a_byte_order_mark_and_crlf_are_tolerated(model: CountingModel) -> None:
    raw = b"\xef\xbb\xbf" + _line({"prompt": "p", "max_tokens": 1}) + b"\r"
    assert isinstance(LineValidator(model, "native").validate(1, raw), BatchEntry)


def test_prompt_is_tokenized_only_when_the_bound_does_not_fit(model: CountingModel) -> None:
    validator = LineValidator(model, "native")
    tokens = ServedModel.count_tokens(model, LONG_PROMPT)
    max_tokens = CONTEXT - tokens  # fits exactly, but the byte bound does not
    assert len(LONG_PROMPT.encode()) + 2 + max_tokens > CONTEXT
    entry = validator.validate(1, _line({"prompt": LONG_PROMPT, "max_tokens": max_tokens}))
    assert isinstance(entry, BatchEntry)
    assert entry.cost_tokens == CONTEXT  # the real count, not the bound
    assert model.counted == [LONG_PROMPT]


def test_prompt_over_the_context_is_refused(model: CountingModel) -> None:
    tokens = ServedModel.count_tokens(model, LONG_PROMPT)
    line = _line({"custom_id": "big", "prompt": LONG_PROMPT, "max_tokens": CONTEXT - tokens + 1})
    error = _error(LineValidator(model, "native").validate(4, line))
    assert (error.custom_id, error.code) == ("big", "context_length_exceeded")
    assert error.message == (
        f"prompt ({tokens} tokens) + max_tokens ({CONTEXT - tokens + 1}) exceeds model 'm' context of {CONTEXT} "
        f"tokens: lower max_tokens to at most {CONTEXT - tokens} or shorten the prompt"
    )


# --- OpenAI batch lines --------------------------------------------------------------------


def _openai(body: dict[str, Any], url: str = "/v1/completions", **line: Any) -> bytes:
    return _line({"custom_id": "r1", "method": "POST", "url": url, "body": body, **line})


def test_openai_completion_line(model: CountingModel) -> None:
    validator = LineValidator(model, "openai", "/v1/completions")
    body = {"model": "m", "prompt": ["one prompt"], "max_tokens": 30, "stream": False, "user": "u"}
    entry = validator.validate(2, _openai(body))
    assert entry == BatchEntry(
        2,
        "r1",
        "/v1/completions",
        {"model": "m", "prompt": ["one prompt"], "max_tokens": 30, "user": "u"},  # stream dropped
        len(b"one prompt") + 2 + 30,
    )


def test_openai_chat_line_uses_the_message_bound(model: CountingModel, renderer: RecordingRenderer) -> None:
    validator = LineValidator(model, "openai", "/v1/chat/completions", renderer)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi ✓"}]
    body = {"model": "m", "messages": messages, "max_completion_tokens": 50}
    entry = validator.validate(1, _openai(body, "/v1/chat/completions"))
    assert isinstance(entry, BatchEntry)
    assert entry.endpoint == "/v1/chat/completions" and entry.body == body
    assert entry.cost_tokens == len(b"Be brief.") + len("Hi ✓".encode()) + 2 * 64 + 2 + 50
    assert renderer.calls == [] and model.counted == []


def test_long_chat_is_rendered_and_counted(model: CountingModel, renderer: RecordingRenderer) -> None:
    validator = LineValidator(model, "openai", "/v1/chat/completions", renderer)
    messages = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": LONG_PROMPT}]
    prompt = renderer.template.render([ChatMessage("system", "Be brief."), ChatMessage("user", LONG_PROMPT)])
    tokens = ServedModel.count_tokens(model, prompt)
    entry = validator.validate(
        1, _openai({"model": "m", "messages": messages, "max_tokens": 100}, "/v1/chat/completions")
    )
    assert isinstance(entry, BatchEntry)
    assert entry.cost_tokens == tokens + 100
    assert [m.role for m in renderer.calls[0]] == ["system", "user"]  # developer is the template's system
    assert model.counted == [prompt]

    too_long = _openai({"model": "m", "messages": messages, "max_tokens": CONTEXT}, "/v1/chat/completions")
    error = _error(validator.validate(2, too_long))
    assert error.code == "context_length_exceeded" and f"prompt ({tokens} tokens)" in error.message


def test_chat_the_template_refuses_is_an_invalid_request(model: CountingModel, renderer: RecordingRenderer) -> None:
    validator = LineValidator(model, "openai", "/v1/chat/completions", renderer)
    messages = [{"role": "assistant", "content": LONG_PROMPT}]  # Llama 2 wants the user first
    error = _error(
        validator.validate(1, _openai({"model": "m", "messages": messages, "max_tokens": 200}, "/v1/chat/completions"))
    )
    assert error.code == "invalid_request"
    assert "Conversation roles must alternate" in error.message


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (_openai({"model": "m", "prompt": "p"}), "body: max_tokens is required"),
        (_openai({"model": "m", "prompt": "p", "max_tokens": 5, "stream": True}), "body.stream must not be true"),
        (_openai({"model": "other", "prompt": "p", "max_tokens": 5}), "body.model must be the batch's model 'm'"),
        (_openai({"model": "m", "prompt": "p", "max_tokens": 5, "foo": 1}), "body: unknown field 'foo': remove it"),
        (_openai({"model": "m", "prompt": "p", "max_tokens": 5, "n": 2}), "'n': not supported by this gateway"),
        (_openai({"model": "m", "prompt": "p", "max_tokens": 5}, method="GET"), "method must be 'POST'; got 'GET'"),
        (_openai({"model": "m", "prompt": "p", "max_tokens": 5}, url="/v1/chat/completions"), "url must be"),
        (_openai({"model": "m", "prompt": "p", "max_tokens": 5}, extra=1), "unknown field 'extra'"),
        (_line({"custom_id": "r1", "method": "POST", "url": "/v1/completions", "body": "p"}), "got a string"),
    ],
)
def test_openai_completion_refusals(model: CountingModel, line: bytes, message: str) -> None:
    error = _error(LineValidator(model, "openai", "/v1/completions").validate(1, line))
    assert (error.custom_id, error.code) == ("r1", "invalid_request")
    assert message in error.message


def test_openai_chat_requires_max_tokens(model: CountingModel, renderer: RecordingRenderer) -> None:
    validator = LineValidator(model, "openai", "/v1/chat/completions", renderer)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    error = _error(validator.validate(1, _openai(body, "/v1/chat/completions")))
    assert "max_tokens is required" in error.message
    body["messages"] = [{"role": "user", "content": "hi", "tool_call_id": "x"}]
    assert (
        "unknown field 'messages.0.tool_call_id'"
        in _error(validator.validate(1, _openai(body, "/v1/chat/completions"))).message
    )


def test_openai_lines_need_a_custom_id(model: CountingModel) -> None:
    raw = _line({"method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "p", "max_tokens": 1}})
    error = _error(LineValidator(model, "openai", "/v1/completions").validate(1, raw))
    assert (error.custom_id, error.code, error.message) == (
        None,
        "invalid_request",
        "custom_id is required: a string of 1-64 characters",
    )


def test_validator_configuration_is_checked(model: CountingModel, renderer: RecordingRenderer) -> None:
    with pytest.raises(ValueError, match="native batches go to /v1/generate"):
        LineValidator(model, "native", "/v1/completions")
    with pytest.raises(ValueError, match="openai batches need an endpoint"):
        LineValidator(model, "openai")
    with pytest.raises(ValueError, match="need a chat_renderer"):
        LineValidator(model, "openai", "/v1/chat/completions")
    assert LineValidator(model, "native", "/v1/generate").endpoint == "/v1/generate"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        # JSON escapes that decode to a lone surrogate: valid JSON, but not text a server can take.
        (b'{"custom_id": "q1", "prompt": "hi \\ud800", "max_tokens": 5}', "'prompt'"),
        (b'{"custom_id": "q1", "prompt": "hi", "max_tokens": 5, "stop": ["\\udfff"]}', "'stop.0'"),
        (b'{"custom_id": "q\\ud800", "prompt": "hi", "max_tokens": 5}', "custom_id must be valid Unicode"),
        (b'{"custom_id": "q1", "prompt": "hi", "max_tokens": 5, "top_p": 1e-50}', "32-bit float"),
        (b'{"custom_id": "q1", "prompt": "hi", "max_tokens": 5, "stop": ["' + b"x" * 300 + b'"]}', "at most 256"),
        (b'{"custom_id": "q1", "prompt": "caf\xe9", "max_tokens": 5}', "not UTF-8"),
    ],
)
def test_a_line_a_server_would_refuse_is_refused_at_upload(model: CountingModel, raw: bytes, says: str) -> None:
    error = _error(LineValidator(model, "native").validate(1, raw))
    assert says in error.message
    assert error.custom_id in (None, "q1")
    if error.custom_id is not None:
        error.custom_id.encode()  # what the errors file writes


def test_an_openai_chat_line_with_a_lone_surrogate_is_refused(
    model: CountingModel, renderer: RecordingRenderer
) -> None:
    raw = (
        b'{"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", '
        b'"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud83d"}]}], "max_tokens": 4}}'
    )
    validator = LineValidator(model, "openai", "/v1/chat/completions", renderer)
    error = _error(validator.validate(1, raw))
    assert "messages.0.content" in error.message and "Unicode" in error.message
