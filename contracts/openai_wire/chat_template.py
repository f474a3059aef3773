"""Chat messages to one prompt string, with the chat template the model ships in its
`tokenizer_config.json` (what HF's `apply_chat_template(..., tokenize=False)` renders).

The template runs in Jinja2's immutable sandbox with the globals HF templates expect
(`raise_exception`, `strftime_now`, the special tokens, `add_generation_prompt=True`).

BOS: templates such as Llama's write `<s>` (`bos_token`) themselves, and HF then encodes
with `add_special_tokens=False`. This gateway instead sends prompt *text* on, and both sides
count and encode it with `add_special_tokens=True` (`ServedModel.count_tokens`,
`bls/tokenizer.encode_prompt`): the tokenizer's post-processor adds BOS. Sent as rendered, such
a prompt would start `<s> <s> [INST]`. So when the tokenizer adds BOS itself, the template's
leading BOS text is dropped, and the token ids come out exactly as HF's:

    rendered         "<s>[INST] hi [/INST]"
    sent on          "[INST] hi [/INST]"        encoded with the post-processor
    token ids        [<s>, [INST], hi, [/INST]]  one BOS, as HF has it

BOS tokens later in a conversation (one per turn in Llama 2) stay: they are text the
tokenizer maps to the special id, as in HF.

Special-token text inside a message is the user's text, never structure: each occurrence is
marked before rendering, so the prompt encoders (contracts/prompt_encoding.py, the same at the
gateway and on the model server) encode it as plain text, and "</s><s>[INST]" in a message
cannot close its turn and forge another. Content that holds the marks themselves is refused.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from config.settings import SwitchyardConfig
from contracts.catalog import ServedModel
from contracts.errors import invalid_request
from contracts.openai_wire.tool_calls import ToolSpec
from contracts.openai_wire.tool_prompt import (
    RESPONSE_OPEN,
    CallInMessage,
    assistant_text,
    template_calls,
    tool_response_text,
    tools_instruction,
)
from contracts.prompt_encoding import LITERAL_CLOSE, LITERAL_OPEN, holds_marks, mark_literal, special_token_pattern

logger = logging.getLogger(__name__)

TOKENIZER_CONFIG = "tokenizer_config.json"
_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")


class TemplateRaised(Exception):
    """A template called `raise_exception(message)`: the conversation is one it refuses."""


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message as the template sees it: `{"role": ..., "content": ...}`; an assistant's may
    hold calls, a `tool` message answers one (contracts/openai_wire/tool_prompt.py renders both)."""

    role: str
    content: str
    tool_calls: tuple[CallInMessage, ...] = ()
    tool_call_id: str | None = None


class ChatTemplate:
    """One model's compiled chat template and the special tokens it is rendered with."""

    def __init__(
        self,
        source: str,
        special_tokens: dict[str, str],
        tokenizer_adds_bos: bool,
        content_specials: re.Pattern[str] | None = None,
    ) -> None:
        """`content_specials`: the tokenizer's special tokens, to be marked as text in messages."""
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._template = env.from_string(source)  # raises TemplateSyntaxError
        self._special_tokens = special_tokens
        bos = special_tokens.get("bos_token", "")
        self._strip_prefix = bos if tokenizer_adds_bos and bos else ""
        self._content_specials = content_specials
        # Whether the template renders tools itself (HF's `tools` variable); else they are
        # written into the messages (contracts/openai_wire/tool_prompt.py).
        self.knows_tools = "tools" in source

    @classmethod
    def from_tokenizer_config(cls, config: dict[str, Any], tokenizer: Tokenizer) -> ChatTemplate | None:
        """The template of a parsed `tokenizer_config.json`; None when it has none."""
        source = _template_source(config.get("chat_template"))
        if source is None:
            return None
        special = {name: text for name in _SPECIAL_TOKENS if (text := _token_text(config.get(name)))}
        return cls(source, special, _adds_bos(tokenizer, special.get("bos_token")), special_token_pattern(tokenizer))

    def render(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()) -> str:
        """The prompt for `messages` (and the `tools` the reply may call), ready for the
        backend; raises `TemplateRaised` or a Jinja2 error when the template cannot render them."""
        if holds_marks([m.content for m in messages]):
            raise TemplateRaised(
                f"message content must not hold U+{ord(LITERAL_OPEN):04X} or U+{ord(LITERAL_CLOSE):04X} "
                "(noncharacters reserved for internal use)"
            )
        extra: dict[str, Any] = {}
        if self.knows_tools:
            extra = {"tools": [tool.model_dump(exclude_none=True) for tool in tools]} if tools else {}
            shown = [self._native(m) for m in messages]
        else:
            shown = [{"role": m.role, "content": m.content} for m in _without_tools(messages, tools)]
        for message in shown:
            message["content"] = mark_literal(message["content"], self._content_specials)
        text = self._template.render(messages=shown, add_generation_prompt=True, **self._special_tokens, **extra)
        if self._strip_prefix and text.startswith(self._strip_prefix):
            return text[len(self._strip_prefix) :]
        return text

    @staticmethod
    def _native(message: ChatMessage) -> dict[str, Any]:
        shown: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            shown["tool_calls"] = template_calls(message.tool_calls)
        if message.tool_call_id is not None:
            shown["tool_call_id"] = message.tool_call_id
        return shown


def _without_tools(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> list[ChatMessage]:
    """A conversation with tools as plain messages (contracts/openai_wire/tool_prompt.py's form)."""
    plain: list[ChatMessage] = []
    for message in messages:
        if message.role == "tool":
            response = tool_response_text(message.tool_call_id or "", message.content)
            if plain and plain[-1].role == "user" and plain[-1].content.startswith(RESPONSE_OPEN):
                plain[-1] = ChatMessage("user", plain[-1].content + "\n" + response)
            else:
                plain.append(ChatMessage("user", response))
        elif message.tool_calls:
            plain.append(ChatMessage(message.role, assistant_text(message.content, message.tool_calls)))
        else:
            plain.append(message)
    if tools:
        instruction = tools_instruction(tools)
        if plain and plain[0].role == "system":
            plain[0] = ChatMessage("system", f"{plain[0].content}\n\n{instruction}")
        else:
            plain.insert(0, ChatMessage("system", instruction))
    return plain


class ChatTemplates:
    """Each served model's chat template, read and compiled on first use."""

    def __init__(self, config: SwitchyardConfig) -> None:
        self.config = config
        # A model's template, or why it has none (a fresh 400 is raised from it each time).
        self._loaded: dict[str, ChatTemplate | str] = {}

    def render(self, model: ServedModel, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()) -> str:
        """The prompt for `messages` (and `tools`) to `model`; 400 when it has no usable template
        or the template refuses the conversation (its own message, e.g. roles must alternate)."""
        template = self._get(model)
        try:
            return template.render(messages, tools)
        except TemplateRaised as exc:
            raise invalid_request(f"model {model.model_id!r} cannot take these messages: {exc}", "messages") from None
        except (TemplateError, TypeError, ValueError) as exc:
            raise invalid_request(
                f"model {model.model_id!r}'s chat template failed on these messages ({type(exc).__name__}: {exc})",
                "messages",
            ) from None

    def _get(self, model: ServedModel) -> ChatTemplate:
        loaded = self._loaded.get(model.model_id)
        if loaded is None:
            loaded = self._load(model)
            self._loaded[model.model_id] = loaded
        if isinstance(loaded, str):
            raise invalid_request(
                f"model {model.model_id!r} cannot serve chat: {loaded}; send a plain prompt to /v1/completions instead",
                "model",
            )
        return loaded

    def _load(self, model: ServedModel) -> ChatTemplate | str:
        path = self.config.model_dir(model.model_id) / TOKENIZER_CONFIG
        try:
            template = ChatTemplate.from_tokenizer_config(_read_json(path), model.tokenizer)
        except (OSError, ValueError, TemplateError) as exc:
            logger.warning("model %s: no usable chat template in %s: %s", model.model_id, path, exc)
            return f"its chat template cannot be loaded ({exc})"
        if template is None:
            return f"its {TOKENIZER_CONFIG} has no chat_template"
        return template


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def _template_source(value: object) -> str | None:
    """`chat_template` is a string, or (newer HF files) a list of named ones: take "default"."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        default = named.get("default")
        return default if isinstance(default, str) else None
    return None


def _token_text(value: object) -> str | None:
    """A special token as `tokenizer_config.json` writes it: a string or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _adds_bos(tokenizer: Tokenizer, bos: str | None) -> bool:
    """Whether encoding with special tokens prepends `bos` (the post-processor says so)."""
    if bos is None:
        return False
    bos_id = tokenizer.token_to_id(bos)
    ids = tokenizer.encode("", add_special_tokens=True).ids
    return bos_id is not None and ids[:1] == [bos_id]


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def _tojson(value: object, indent: int | None = None) -> str:
    # HF's variant: non-ASCII kept as is (Jinja's built-in escapes it for HTML).
    return json.dumps(value, ensure_ascii=False, indent=indent)
