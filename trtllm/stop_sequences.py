"""Token-level stop sequences on a streamed reply, for engines that only stop on single ids.

The CPU engine stops a reply the step its tail equals a stop sequence and emits the matching
tokens (the postprocessor trims the text). TensorRT-LLM's LLM API takes single stop token ids
only, so the GPU engine loop feeds each streamed delta through a `StopSequenceMatcher` and, on
a match, ends the reply after the match and aborts the request in the engine. A match may span
resumed tokens and new ones, as on the CPU engine.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopSequenceMatcher:
    """Finds where a reply first ends with one of `stop_sequences`."""

    def __init__(self, stop_sequences: Sequence[Sequence[int]], resumed: Sequence[int] = ()) -> None:
        if any(not stop for stop in stop_sequences):
            raise ValueError("stop sequences must not be empty")
        self._stops = [tuple(stop) for stop in stop_sequences]
        self._longest = max((len(stop) for stop in self._stops), default=0)
        self._tail: list[int] = list(resumed[-self._longest :]) if self._longest else []

    def feed(self, new_token_ids: Sequence[int]) -> int | None:
        """How many of `new_token_ids` to keep when a stop sequence ends among them (the match
        included); None when none does. Tokens after a match are not looked at."""
        if not self._stops:
            return None
        for i, token_id in enumerate(new_token_ids):
            self._tail.append(token_id)
            if len(self._tail) > self._longest:
                del self._tail[0]
            for stop in self._stops:
                if len(stop) <= len(self._tail) and tuple(self._tail[-len(stop) :]) == stop:
                    return i + 1
        return None
