"""A chat reply in OpenAI's shapes: what the engine is asked for (a grammar from `tools` or
`response_format`, log-probabilities), and the reply as `chat.completion` or its streamed
`chat.completion.chunk` events, as text or as a tool call.

    tool_choice "none" (or no tools)   response_format's grammar, if any; the reply is text
    tool_choice auto/required/named    the tools' grammar (contracts/openai_wire/tool_calls.py); a reply
                                       that is a call comes back as `tool_calls`, its
                                       finish_reason "tool_calls" (a call cut by max_tokens:
                                       "length", its arguments as far as they got)
"""

from __future__ import annotations

import hashlib

from contracts.errors import invalid_request
from contracts.generation import GenerationDelta, Usage
from contracts.openai_wire.logprobs import ChatLogprobs, chat_logprobs, reply_logprobs, token_logprobs
from contracts.openai_wire.response_format import TextFormat
from contracts.openai_wire.schemas import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatDelta,
    ChatMessageOut,
    CompletionUsage,
    FinishReason,
    FunctionCallDelta,
    FunctionCallOut,
    ToolCallDelta,
    ToolCallOut,
)
from contracts.openai_wire.tool_calls import parse_call, tool_call_grammar
from contracts.service_tier import TIER_OF_CLASS
from contracts.token_text import TokenTexts
from gateway.openai_serving import Constraints, sse_data
from gateway.tool_call_stream import Piece, ToolCallReader
from serving.requests_registry import InflightRequest


def chat_constraints(body: ChatCompletionRequest) -> Constraints:
    """The grammar and log-probabilities `body` asks the engine for; 400 when it asks for two
    grammars at once (a call and a response format)."""
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    choice = body.tool_choice_in_force
    formatted = body.response_format is not None and not isinstance(body.response_format, TextFormat)
    if choice != "none" and body.tools:
        if formatted:
            raise invalid_request(
                "response_format cannot be combined with tools the reply may call: send tool_choice 'none', "
                "or leave response_format out",
                "response_format",
            )
        return Constraints(tool_call_grammar(body.tools, choice), "tools", logprobs)
    grammar = None if body.response_format is None else body.response_format.grammar()
    return Constraints(grammar, "response_format", logprobs)


def call_id(public_id: str, index: int = 0) -> str:
    """A call's id: `call_` and a digest of the request's, the same on every read of the reply."""
    return "call_" + hashlib.sha256(f"{public_id}:{index}".encode()).hexdigest()[:24]


def whole_chat(
    entry: InflightRequest,
    chunk_id: str,
    created: int,
    model: str,
    reason: FinishReason,
    *,
    texts: TokenTexts | None,
    calls: bool,
) -> ChatCompletion:
    """The whole reply: text, or (`calls`: tools in force) the call it holds."""
    text = entry.text
    call = parse_call(text) if calls else None
    if call is None:
        message = ChatMessageOut(content=text)
    else:
        function = FunctionCallOut(name=call.name, arguments=call.arguments)
        message = ChatMessageOut(content=None, tool_calls=[ToolCallOut(id=call_id(entry.public_id), function=function)])
        reason = "tool_calls" if call.complete and reason == "stop" else reason
    logprobs = None if texts is None else chat_logprobs(texts, reply_logprobs(entry.deltas))
    choice = ChatChoice(message=message, logprobs=logprobs, finish_reason=reason)
    return ChatCompletion(
        id=chunk_id, created=created, model=model, choices=[choice], usage=CompletionUsage.of(entry.usage),
        service_tier=TIER_OF_CLASS[entry.request_class],
    )  # fmt: skip


class ChatChunks:
    """The streamed `chat.completion.chunk` events of one request (gateway/openai_serving.py's
    ChunkWriter): content, or a call's pieces, each with its tokens' log-probabilities."""

    def __init__(
        self, chunk_id: str, created: int, model: str, entry: InflightRequest, *, texts: TokenTexts | None, calls: bool
    ) -> None:
        self.id = chunk_id
        self._created = created
        self._model = model
        self._public_id = entry.public_id
        self._tier = TIER_OF_CLASS[entry.request_class]
        self._texts = texts
        self._reader = ToolCallReader() if calls else None

    def opening(self) -> list[bytes]:
        return [self._event([ChatChunkChoice(delta=ChatDelta(role="assistant", content=""))])]

    def delta(self, delta: GenerationDelta) -> list[bytes]:
        logprobs = None
        if self._texts is not None and delta.token_ids:
            logprobs = chat_logprobs(self._texts, token_logprobs(delta.token_ids, delta.logprobs))
        if self._reader is None:
            pieces: list[Piece] = [("content", delta.text)] if delta.text else []
        else:
            pieces = self._reader.feed(delta.text)
        return self._pieces(pieces, logprobs)

    def finish(self, reason: FinishReason) -> list[bytes]:
        events: list[bytes] = []
        if self._reader is not None:
            events = self._pieces(self._reader.close(), None)
            if self._reader.complete and reason == "stop":
                reason = "tool_calls"
        return [*events, self._event([ChatChunkChoice(delta=ChatDelta(), finish_reason=reason)])]

    def usage(self, usage: Usage) -> bytes:
        return self._event([], CompletionUsage.of(usage))

    def _pieces(self, pieces: list[Piece], logprobs: ChatLogprobs | None) -> list[bytes]:
        """One event per piece, the log-probabilities on the first (or alone, when the text is
        held back)."""
        deltas = [self._delta(kind, text) for kind, text in pieces]
        if not deltas and logprobs is not None and logprobs.content:
            deltas = [ChatDelta(content="")]
        return [
            self._event([ChatChunkChoice(delta=d, logprobs=logprobs if i == 0 else None)]) for i, d in enumerate(deltas)
        ]

    def _delta(self, kind: str, text: str) -> ChatDelta:
        if kind == "content":
            return ChatDelta(content=text)
        if kind == "name":
            call = ToolCallDelta(
                id=call_id(self._public_id), type="function", function=FunctionCallDelta(name=text, arguments="")
            )
            return ChatDelta(tool_calls=[call])
        return ChatDelta(tool_calls=[ToolCallDelta(function=FunctionCallDelta(arguments=text))])

    def _event(self, choices: list[ChatChunkChoice], usage: CompletionUsage | None = None) -> bytes:
        chunk = ChatCompletionChunk(
            id=self.id, created=self._created, model=self._model, choices=choices, usage=usage, service_tier=self._tier
        )
        return sse_data(chunk)
