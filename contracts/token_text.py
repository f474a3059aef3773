"""What one token of a model's vocabulary stands for, as OpenAI's log-probabilities show it:
its bytes (`bytes`) and its text (`token`), from the tokenizer the gateway already holds.

    byte-level BPE (GPT-2's alphabet: each byte one character)   "Ġthe" -> b" the"
    byte fallback (`<0xE2>`)                                      "<0xE2>" -> b"\\xe2"
    added tokens (BOS, chat markers)                              their content: "<s>"
    anything else                                                 the tokenizer's decode of the id

A token may hold part of a character (byte-level BPE splits UTF-8 anywhere): its `token` is
then `bytes:` and its bytes escaped (`bytes:\\xe2\\x80`), OpenAI's spelling, while `bytes`
holds the exact bytes, which joined in order are the reply's UTF-8.
"""

from __future__ import annotations

import codecs
import json
import re
import threading
from collections.abc import Iterable

from tokenizers import Tokenizer

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte (its `bytes_to_unicode`, inverted)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(char): byte for byte, char in zip(printable, chars, strict=True)}


class TokenTexts:
    """Each token id's bytes and shown text for one tokenizer, worked out on first use and kept
    (thread-safe: a dict's item writes are atomic; a race computes one value twice)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        self._loaded = False
        self._byte_level = False
        self._added: dict[int, tuple[str, bool]] = {}  # id -> (content, special)
        self._alphabet: dict[str, int] = {}
        self._bytes: dict[int, bytes] = {}

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            spec = json.loads(self._tokenizer.to_str())
            self._byte_level = "ByteLevel" in json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")])
            self._added = {t["id"]: (t["content"], bool(t.get("special"))) for t in spec.get("added_tokens", [])}
            self._alphabet = _byte_alphabet()
            self._loaded = True

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token `token_id` stands for (an unknown id: none)."""
        cached = self._bytes.get(token_id)
        if cached is None:
            cached = self._bytes[token_id] = self._compute(token_id)
        return cached

    def is_special(self, token_id: int) -> bool:
        """A special token (BOS, EOS): shown, but no part of the text."""
        self._load()
        added = self._added.get(token_id)
        return added is not None and added[1]

    def token(self, token_id: int) -> str:
        """The token's text as OpenAI shows it (see the module docstring)."""
        return shown(self.token_bytes(token_id))

    def _compute(self, token_id: int) -> bytes:
        self._load()
        added = self._added.get(token_id)
        if added is not None:
            return added[0].encode()
        piece = self._tokenizer.id_to_token(token_id)
        if piece is None:
            return b""
        if self._byte_level and all(char in self._alphabet for char in piece):
            return bytes(self._alphabet[char] for char in piece)
        fallback = _BYTE_FALLBACK.match(piece)
        if fallback is not None:
            return bytes([int(fallback.group(1), 16)])
        if "\u2581" in piece:  # SentencePiece's word marker is a space
            return piece.replace("\u2581", " ").encode()
        return self._tokenizer.decode([token_id], skip_special_tokens=False).encode()


def shown(data: bytes) -> str:
    """Bytes as a token's text: the text when they are whole UTF-8, else `bytes:\\x..`."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{byte:02x}" for byte in data)


class TextOffsets:
    """Each token's offset in characters into the text the tokens spell, run after run (a
    streamed reply's deltas): where its first byte's character begins. Special tokens take no
    room in the text."""

    def __init__(self, texts: TokenTexts, start: int = 0) -> None:
        self._texts = texts
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._offset = start

    def take(self, token_ids: Iterable[int]) -> list[int]:
        """The offsets of the next run of tokens."""
        offsets: list[int] = []
        for token_id in token_ids:
            offsets.append(self._offset)
            if not self._texts.is_special(token_id):
                self._offset += len(self._decoder.decode(self._texts.token_bytes(token_id)))
        return offsets
