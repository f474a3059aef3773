"""A chat reply read as it streams, when it may be a tool call: text passes on as content, a
call (contracts/openai_wire/tool_calls.py's form) as its name, then its arguments piece by piece, as OpenAI
streams `delta.tool_calls`.

    <tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>
    └──────── held until the name is whole ─┘└── arguments, streamed ──┘└ tail: held back ┘

Until the reply's first characters rule the marker in or out, they are held (at most its 20
characters); in a call, the last characters are held back until the reply ends, since only the
end says whether they are the call's closing `}</tool_call>` or part of its arguments.
"""

from __future__ import annotations

from typing import Literal

from contracts.openai_wire.tool_calls import ARGUMENTS_KEY, CALL_HEAD, CALL_OPEN, CALL_TAIL

Piece = tuple[Literal["content", "name", "arguments"], str]
_CALL_START = CALL_OPEN + CALL_HEAD


class ToolCallReader:
    """Splits a streamed reply into content, or a call's name and argument pieces."""

    def __init__(self) -> None:
        self._held = ""
        self._mode: Literal["undecided", "text", "name", "arguments"] = "undecided"
        self.called = False  # the reply is a call (its name was read)
        self.complete = False  # ... and it was closed (set by `close`)

    def feed(self, text: str) -> list[Piece]:
        """What `text`, the reply's next piece, lets through."""
        if self._mode == "text":
            return [("content", text)] if text else []
        self._held += text
        pieces: list[Piece] = []
        if self._mode == "undecided":
            if self._held.startswith(_CALL_START):
                self._mode = "name"
            elif _CALL_START.startswith(self._held):
                return []
            else:
                self._mode = "text"
                held, self._held = self._held, ""
                return [("content", held)]
        if self._mode == "name":
            name, found, rest = self._held[len(_CALL_START) :].partition(ARGUMENTS_KEY)
            if not found:
                return []
            pieces.append(("name", name))
            self.called = True
            self._mode, self._held = "arguments", rest
        # arguments: everything but what may yet be the closing tail
        ready = len(self._held) - len(CALL_TAIL)
        if ready > 0:
            pieces.append(("arguments", self._held[:ready]))
            self._held = self._held[ready:]
        return pieces

    def close(self) -> list[Piece]:
        """What is still held, once the reply has ended."""
        held, self._held = self._held, ""
        if self._mode == "arguments":
            self.complete = held.endswith(CALL_TAIL)
            rest = held.removesuffix(CALL_TAIL) if self.complete else held
            return [("arguments", rest)] if rest else []
        return [("content", held)] if held else []
