"""Prompt text to token ids, where a chat message's special-token text stays text.

A chat prompt is text rendered from a template: the template's own special tokens (`<s>`,
`</s>`, `<|im_start|>`) must become their ids, but the same characters inside a message are the
user's text. Encoded as one string, a user message holding "</s><s>[INST]" would close its own
turn and forge another. So the chat template wraps every special token's text that a message
holds in two noncharacters (Unicode keeps U+FDD0..U+FDEF for internal use; chat content holding
them is refused), and every side that tokenizes a prompt (the gateway's count, the model
server's `preprocessing`) encodes with `PromptEncoder`:

    rendered   "<s>[INST] hi ⟦</s>⟧ there [/INST]"          ⟦ ⟧ = U+FDD0, U+FDD1
    runs       <s> | "[INST] hi </s> there [/INST]"           special | text
    ids        [1,   ... "<", "/", "s", ">" as plain text ...]

Runs of text are encoded with special tokens read as plain text (`encode_special_tokens`), the
special tokens outside the marks as their ids, and the tokenizer's post-processor adds BOS once,
as for any prompt. A prompt without marks (every raw completion prompt, most chats) is encoded
exactly as before, in one call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tokenizers import Encoding, Tokenizer

LITERAL_OPEN = "\ufdd0"
LITERAL_CLOSE = "\ufdd1"
MARKS = (LITERAL_OPEN, LITERAL_CLOSE)


class PromptEncoder:
    """Encodes prompts with one tokenizer, honouring literal marks (see the module docstring).

    Holds a second copy of the tokenizer, set to read special tokens as text: the flag is the
    tokenizer's own state, and flipping it on a shared one would race with other threads."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._literal = Tokenizer.from_str(tokenizer.to_str())
        self._literal.encode_special_tokens = True
        self._special = special_token_pattern(tokenizer)

    def mark_literal(self, content: str) -> str:
        """`content` with each special token's text marked to be encoded as plain text."""
        return mark_literal(content, self._special)

    def encode(self, text: str) -> list[int]:
        """Prompt token ids, BOS added as the tokenizer's post-processor says.

        `encode_batch`, not `encode`: the same ids, with the GIL released while Rust works."""
        if LITERAL_OPEN not in text:
            ids: list[int] = self._tokenizer.encode_batch([text], add_special_tokens=True)[0].ids
            return ids
        runs = self._runs(text)
        if not runs:  # nothing but marks
            return self.encode("")
        specials = [i for i, (special, _) in enumerate(runs) if special]
        texts = [i for i, (special, _) in enumerate(runs) if not special]
        encodings: list[Encoding | None] = [None] * len(runs)
        for indexes, tokenizer in ((specials, self._tokenizer), (texts, self._literal)):
            batch = tokenizer.encode_batch([runs[i][1] for i in indexes], add_special_tokens=False)
            for i, encoding in zip(indexes, batch, strict=True):
                encodings[i] = encoding
        merged = Encoding.merge([e for e in encodings if e is not None])
        return list(self._tokenizer.post_process(merged).ids)

    def _runs(self, text: str) -> list[tuple[bool, str]]:
        """`text` as (is a special token, text) runs: special tokens outside the marks on their
        own; everything else, marked parts included (marks dropped), joined into text runs."""
        runs: list[tuple[bool, str]] = []
        current: list[str] = []

        def outside(piece: str) -> None:
            piece = piece.replace(LITERAL_CLOSE, "")  # a stray close mark means nothing
            start = 0
            for match in self._special.finditer(piece) if self._special is not None else ():
                current.append(piece[start : match.start()])
                flush()
                runs.append((True, match.group()))
                start = match.end()
            current.append(piece[start:])

        def flush() -> None:
            if any(current):
                runs.append((False, "".join(current)))
            current.clear()

        first, *rest = text.split(LITERAL_OPEN)
        outside(first)
        for part in rest:
            literal, _, after = part.partition(LITERAL_CLOSE)  # an unclosed mark runs to the end
            current.append(literal)
            outside(after)
        flush()
        return runs


def special_token_pattern(tokenizer: Tokenizer) -> re.Pattern[str] | None:
    """A regex of the tokenizer's special tokens' texts, longest first; None when it has none."""
    texts = sorted((t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special), key=len)
    return re.compile("|".join(map(re.escape, reversed(texts)))) if texts else None


def mark_literal(content: str, specials: re.Pattern[str] | None) -> str:
    """`content` with each match of `specials` marked to be encoded as plain text."""
    if specials is None:
        return content
    return specials.sub(lambda m: LITERAL_OPEN + m.group() + LITERAL_CLOSE, content)


def holds_marks(texts: Sequence[str]) -> bool:
    """Whether any of `texts` holds a literal mark (chat content must not: it is refused)."""
    return any(mark in text for text in texts for mark in MARKS)
