"""Bodies of the OpenAI-compatible routes, `/v1/completions` and `/v1/chat/completions`.

Requests are as strict as the rest of the API (no "5" for 5, unknown fields refused, as OpenAI
refuses them), but shaped for the official SDK and the tools built on it:

- honoured: model, prompt / messages, max_tokens (chat: or max_completion_tokens), stop,
  stream, stream_options.include_usage, temperature, top_p, seed, n=1, user (ignored),
  response_format (contracts/openai_wire/response_format.py); chat: tools and tool_choice
  (contracts/openai_wire/tool_calls.py), logprobs and top_logprobs; completions: logprobs and echo;
- max_tokens absent or null: the route's default (below), lowered to what the model's context
  and the team's hard limits leave after the prompt;
- extensions, named as vLLM names them: top_k, ignore_eos;
- OpenAI fields this gateway cannot honour: accepted at the neutral value clients send by
  default (null, false, 0, empty); any other value is a 400 naming the field.

Responses are OpenAI's objects: `text_completion`, `chat.completion` and, streamed,
`text_completion` / `chat.completion.chunk` events.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
)
from pydantic_core import PydanticCustomError

from contracts.caller_echo import echoed
from contracts.field_checks import UnicodeChecked
from contracts.generation import Usage
from contracts.neutral_values import Neutral
from contracts.openai_wire.chat_template import ChatMessage
from contracts.openai_wire.logprobs import ChatLogprobs, CompletionLogprobs
from contracts.openai_wire.response_format import ResponseFormat
from contracts.openai_wire.tool_calls import ToolChoice, Tools, ToolSpec, tool_choice_of, tools_problem
from contracts.openai_wire.tool_prompt import CallInMessage
from contracts.prompt_encoding import LITERAL_CLOSE, LITERAL_OPEN
from contracts.schemas import INT32_MAX, INT64_MAX, INT64_MIN, StopList, TopP
from contracts.service_tier import ServiceTier

FinishReason = Literal["stop", "length", "tool_calls"]
# OpenAI's bounds: completions' `logprobs` alternatives, chat's `top_logprobs`.
MAX_COMPLETION_LOGPROBS = 5
MAX_TOP_LOGPROBS = 20
# OpenAI's newer name for the system role; chat templates know only "system".
_TEMPLATE_ROLES = {"developer": "system"}


def _one_prompt(value: object) -> object:
    """A list holding one string is that string; batches and token ids are refused."""
    if not isinstance(value, list):
        return value
    if value and all(isinstance(item, int) for item in value):
        raise PydanticCustomError("token_prompt", "token-id prompts are not supported: send text")
    if len(value) != 1:
        raise PydanticCustomError(
            "batch_prompt", "one prompt per request; this list holds {count}", {"count": len(value)}
        )
    return value[0]


# Chat text as the document shows it: without the two noncharacters the chat template keeps for
# itself (contracts/prompt_encoding.py), which a message holding them is refused for.
ChatText = Annotated[str, Field(pattern=f"^[^{LITERAL_OPEN}{LITERAL_CLOSE}]*$")]


class TextPart(BaseModel):
    """One part of a message's content as the document shows it: text only (others are refused)."""

    type: Literal["text"]
    text: ChatText


def _text_content(value: object) -> object:
    """Message content: a string, or a list of text parts joined by newlines (as vLLM does)."""
    if not isinstance(value, list):
        return value
    texts: list[str] = []
    for part in value:
        if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
            kind = echoed(part.get("type")) if isinstance(part, dict) else type(part).__name__
            raise PydanticCustomError("text_only", "only text parts are supported, not {kind}", {"kind": kind})
        texts.append(part["text"])
    return "\n".join(texts)


NonEmptyStr = Annotated[str, Field(min_length=1)]
OnePrompt = Field(min_length=1, max_length=1)  # a list of prompts is taken when it holds one
MaxTokens = Annotated[int, Field(ge=1, le=INT32_MAX)]

# A reply without max_tokens may run this long, lowered to what the model's context and the
# team's hard limits leave after the prompt (gateway/openai_serving.py, `reply_max_tokens`).
# OpenAI's rule for each route: completions stop at 16 tokens; chat runs to the end of the
# context, here at most 2,048 tokens (the brief's longest replies), since admission leases
# prompt + max_tokens of KV for the whole reply, and a whole context per chat would hold a
# team's share (and crowd out everyone's requests) for replies that are mostly far shorter.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
CHAT_DEFAULT_MAX_TOKENS = 2048


def _max_tokens_field(default: int, what: str = "The reply's limit in tokens") -> Any:
    """The field's default (None) and the rule the route applies to it, for the OpenAPI document."""
    return Field(
        None,
        description=f"{what}. Absent or null: {default:,}, lowered to what the model's context and the team's "
        "limits (max_inflight_tokens, tokens_per_day) leave after the prompt.",
    )


class StreamOptions(UnicodeChecked):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    include_usage: bool | None = None
    include_obfuscation: bool | None = None  # ignored: nothing here needs padding against side channels


# OpenAI's sampling temperature when a request gives none (or null): `/v1/generate` keeps its
# documented default instead (greedy).
OPENAI_TEMPERATURE = 1.0


class _OpenAIRequest(UnicodeChecked):
    """Fields both routes take (declaration order matters: validators read earlier fields).
    Ranges are the engine's after conversion to each tensor's dtype (contracts/field_checks.py);
    every text must be valid Unicode."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

    model: NonEmptyStr
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: StopList = Field(default_factory=list)
    # OpenAI's default: sampled at temperature 1 (null too); 0 is greedy. `seed` reproduces a
    # sampled reply (the engines draw token i from (seed, i)).
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = OPENAI_TEMPERATURE
    top_p: TopP | None = None
    seed: Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)] | None = None
    n: Annotated[Any, Neutral(1)] = None
    user: str | None = None
    # Extensions (vLLM's names): pass them through the SDK's `extra_body`.
    top_k: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    ignore_eos: bool | None = None
    # OpenAI fields this gateway cannot honour, accepted at their neutral value.
    presence_penalty: Annotated[Any, Neutral(0, 0.0)] = None
    frequency_penalty: Annotated[Any, Neutral(0, 0.0)] = None
    logit_bias: Annotated[Any, Neutral({})] = None
    # The reply held to a JSON schema or object (contracts/openai_wire/response_format.py).
    response_format: ResponseFormat | None = None
    # The level of service (docs/tiers.md): `auto` (or none) is the team's default tier.
    service_tier: Literal["auto", "default", "flex", "priority"] | None = Field(
        None,
        description="The level of service (docs/tiers.md). Absent, null or `auto`: the team's default tier. "
        "With header X-Switchyard-Class as well, the two must name the same tier (else a 400).",
    )

    @field_validator("stream_options")
    @classmethod
    def _only_when_streaming(cls, value: StreamOptions | None, info: ValidationInfo) -> StreamOptions | None:
        if value is not None and not info.data.get("stream"):
            raise PydanticCustomError("stream_options", "only allowed with stream: true")
        return value

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_OpenAIRequest):
    """POST /v1/completions."""

    default_max_tokens: ClassVar[int] = COMPLETIONS_DEFAULT_MAX_TOKENS  # OpenAI's

    prompt: Annotated[
        str,
        BeforeValidator(_one_prompt, json_schema_input_type=NonEmptyStr | Annotated[list[NonEmptyStr], OnePrompt]),
        Field(min_length=1),
    ]
    max_tokens: MaxTokens | None = _max_tokens_field(COMPLETIONS_DEFAULT_MAX_TOKENS)
    # Each token's log-probability and this many alternatives (with echo: the prompt's too).
    logprobs: Annotated[int, Field(ge=0, le=MAX_COMPLETION_LOGPROBS)] | None = None
    echo: bool | None = None  # the prompt's text before the reply's
    best_of: Annotated[Any, Neutral(1)] = None
    suffix: Annotated[Any, Neutral("")] = None

    @property
    def completion_limit(self) -> int | None:
        """max_tokens as the caller sent it; None: `default_max_tokens` applies."""
        return self.max_tokens


class FunctionCallIn(UnicodeChecked):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: str
    arguments: str  # JSON text, as the reply that made the call gave it


class ToolCallIn(UnicodeChecked):
    """An earlier call in the conversation (an assistant message's `tool_calls`)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    id: str
    type: Literal["function"]
    function: FunctionCallIn


ChatContent = Annotated[str, BeforeValidator(_text_content, json_schema_input_type=ChatText | list[TextPart])]


class _Message(UnicodeChecked):
    """What every message of a chat request may hold."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: str | None = None  # accepted, not shown to the model (templates have no place for it)
    refusal: Annotated[Any, Neutral()] = None
    function_call: Annotated[Any, Neutral()] = None


class TextMessage(_Message):
    role: Literal["system", "developer", "user"]
    content: ChatContent
    tool_calls: Annotated[Any, Neutral([])] = None

    @property
    def text(self) -> str:
        return self.content


class AssistantMessage(_Message):
    """An earlier reply: text, calls, or both (content may be null with calls)."""

    role: Literal["assistant"]
    content: Annotated[
        str | None, BeforeValidator(_text_content, json_schema_input_type=ChatText | list[TextPart] | None)
    ] = None
    tool_calls: list[ToolCallIn] | None = None

    @property
    def text(self) -> str:
        return self.content or ""


class ToolMessage(_Message):
    """A call's result, answering the call `tool_call_id` names."""

    role: Literal["tool"]
    content: ChatContent
    tool_call_id: str

    @property
    def text(self) -> str:
        return self.content


ChatMessageIn = Annotated[TextMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]


class ChatCompletionRequest(_OpenAIRequest):
    """POST /v1/chat/completions. Without max_tokens the reply may fill the rest of the context
    (up to CHAT_DEFAULT_MAX_TOKENS)."""

    default_max_tokens: ClassVar[int] = CHAT_DEFAULT_MAX_TOKENS

    messages: Annotated[list[ChatMessageIn], Field(min_length=1)]
    max_tokens: MaxTokens | None = _max_tokens_field(CHAT_DEFAULT_MAX_TOKENS)
    max_completion_tokens: MaxTokens | None = _max_tokens_field(
        CHAT_DEFAULT_MAX_TOKENS, "OpenAI's newer name for max_tokens (both given must agree)"
    )
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    tools: Tools | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None  # one call a reply is always an answer it allows
    store: Annotated[Any, Neutral(False)] = None
    metadata: dict[str, str] | None = None  # only for stored completions, which there are none of

    @field_validator("max_completion_tokens")
    @classmethod
    def _agrees_with_max_tokens(cls, value: int | None, info: ValidationInfo) -> int | None:
        other = info.data.get("max_tokens")
        if value is not None and other is not None and other != value:
            raise PydanticCustomError(
                "max_tokens_conflict", "differs from max_tokens ({other}): send one of them", {"other": other}
            )
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _with_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and not info.data.get("logprobs"):
            raise PydanticCustomError("top_logprobs", "needs logprobs: true")
        return value

    @field_validator("tools")
    @classmethod
    def _unique_names(cls, value: list[ToolSpec] | None) -> list[ToolSpec] | None:
        problem = tools_problem(value, None)
        if problem is not None:
            raise PydanticCustomError("tools", "{problem}", {"problem": problem[1]})
        return value

    @field_validator("tool_choice")
    @classmethod
    def _names_a_tool(cls, value: ToolChoice | None, info: ValidationInfo) -> ToolChoice | None:
        problem = tools_problem(info.data.get("tools"), value)
        if problem is not None:
            raise PydanticCustomError("tool_choice", "{problem}", {"problem": problem[1]})
        return value

    @property
    def completion_limit(self) -> int | None:
        """max_tokens (or max_completion_tokens) as the caller sent it; None: `default_max_tokens` applies."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def tool_choice_in_force(self) -> ToolChoice:
        return tool_choice_of(self.tools, self.tool_choice)

    @property
    def shown_tools(self) -> list[ToolSpec]:
        """The tools the model is told of: none when it may not call them."""
        return list(self.tools or ()) if self.tool_choice_in_force != "none" else []

    def template_messages(self) -> list[ChatMessage]:
        """The messages as the chat template takes them ("developer" is "system" to templates)."""
        return [
            ChatMessage(
                _TEMPLATE_ROLES.get(m.role, m.role),
                m.text,
                tuple(CallInMessage(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or ())
                if isinstance(m, AssistantMessage)
                else (),
                m.tool_call_id if isinstance(m, ToolMessage) else None,
            )
            for m in self.messages
        ]


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails

    @classmethod
    def of(cls, usage: Usage) -> CompletionUsage:
        return cls(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.prompt_tokens + usage.completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.cached_tokens),
        )


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason | None


class Completion(BaseModel):
    """A whole `/v1/completions` reply, and (with `usage` null) each streamed event."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage | None = None
    service_tier: ServiceTier | None = None  # the tier that served it


class FunctionCallOut(BaseModel):
    name: str
    arguments: str  # JSON text


class ToolCallOut(BaseModel):
    id: str  # call_...
    type: Literal["function"] = "function"
    function: FunctionCallOut


class _CallsWhenAny(BaseModel):
    """Written without `tool_calls` when it holds none: a text reply reads as it always has."""

    @model_serializer(mode="wrap")
    def _calls_when_any(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if dumped.get("tool_calls") is None:
            dumped.pop("tool_calls", None)
        return dumped


class ChatMessageOut(_CallsWhenAny):
    role: Literal["assistant"] = "assistant"
    content: str | None  # null when the reply is a call
    tool_calls: list[ToolCallOut] | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: CompletionUsage
    service_tier: ServiceTier | None = None  # the tier that served it


class _WithoutNulls(BaseModel):
    """Written without its null fields: a streamed call's later pieces name only what they add."""

    @model_serializer(mode="wrap")
    def _without_nulls(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class FunctionCallDelta(_WithoutNulls):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(_WithoutNulls):
    """A piece of a streamed call: the first has its id, type and name; the others arguments."""

    index: int = 0
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta


class ChatDelta(_CallsWhenAny):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: CompletionUsage | None = None
    service_tier: ServiceTier | None = None  # the tier that served it
