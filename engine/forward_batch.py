"""The contract between the scheduler side of the engine and the model that computes tokens.

One engine step hands the model a list of chunks, one per scheduled sequence. Each chunk is
the next run of tokens that sequence has not computed yet: a whole prompt, a slice of a long
prompt (chunked prefill), or the single last token of a reply (decode).

    positions:   0 ........ start_position-1 | start_position ... start_position+len-1
    KV:          already in the paged cache   | computed now, written into the cache
    block_table: physical block ids covering positions [0, start_position + len(token_ids))

Position p lives in block `block_table[p // block_size]` at offset `p % block_size`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class SequenceChunk:
    """The tokens one sequence computes in this step, and where its KV lives."""

    token_ids: tuple[int, ...]
    start_position: int
    block_table: tuple[int, ...]
    # True when the chunk reaches the end of the known tokens, so its last position yields
    # logits for sampling the next token. A middle slice of a long prompt needs none.
    need_logits: bool
    # Logits at every position of the chunk, not only the last: the prompt's own
    # log-probabilities (a prompt token's is read off the logits of the position before it).
    all_logits: bool = False


class Model(Protocol):
    """What the engine needs from a model: compute chunks over a paged KV cache it owns."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_token_id(self) -> int | None: ...

    def forward(self, chunks: list[SequenceChunk]) -> npt.NDArray[np.float32]:
        """Compute every chunk, writing its K/V into the cache at its block_table slots.

        Returns float32 logits [rows, vocab_size]: a chunk with `all_logits` gives one row per
        token, one with only `need_logits` its last position's, any other none; rows in the
        order of `chunks` and of positions within a chunk (`logit_rows` counts them).
        """
        ...


def logit_rows(chunk: SequenceChunk) -> int:
    """How many rows of logits `chunk` yields."""
    if chunk.all_logits:
        return len(chunk.token_ids)
    return 1 if chunk.need_logits else 0
