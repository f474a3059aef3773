"""Log-probabilities of chosen tokens and their most likely alternatives, from rows of logits.

Which distribution: the log-softmax of the logits the sampler reads, after the grammar's mask
and before temperature, top-k and top-p. So the numbers do not move with the sampling knobs (a
request at temperature 0 and one at 0.7 report the same model), and under a grammar every
alternative listed is a token the reply could have held: a token the grammar rules out has
probability 0 (reported as LOGPROB_FLOOR), and a forced token has log-probability 0.
Unconstrained, this is exactly the model's distribution (docs/openai.md, "Log-probabilities").

Only rows whose request asked are computed: an O(vocab) pass and a partial sort per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.request import LOGPROB_FLOOR, TokenLogprobs


def token_logprobs(logits: npt.NDArray[np.floating[Any]], token_ids: npt.ArrayLike, num_top: int) -> TokenLogprobs:
    """Log-probabilities of `token_ids[i]` under row i of `logits` ([n, vocab]), with the
    `num_top` most likely tokens of each row (most likely first, the lower id first on ties)."""
    rows = np.asarray(logits, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"expected [n, vocab] logits, got shape {rows.shape}")
    ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
    if ids.size != rows.shape[0]:
        raise ValueError(f"{ids.size} token ids for {rows.shape[0]} rows of logits")
    if not 0 <= num_top <= rows.shape[1]:
        raise ValueError(f"num_top must be in [0, {rows.shape[1]}], got {num_top}")
    log_z = _logsumexp(rows)
    chosen = rows[np.arange(ids.size), ids] - log_z
    if num_top == 0:
        return TokenLogprobs(tuple(_floored(chosen).tolist()))
    top_ids = _top_ids(rows, num_top)
    top = np.take_along_axis(rows, top_ids, axis=1) - log_z[:, None]
    return TokenLogprobs(
        tuple(_floored(chosen).tolist()),
        tuple(top_ids.reshape(-1).tolist()),
        tuple(_floored(top.reshape(-1)).tolist()),
        num_top,
    )


def _logsumexp(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """log(sum(exp(row))) per row; a row masked to -inf everywhere gives -inf."""
    peak = rows.max(axis=1)
    safe_peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):
        result: npt.NDArray[np.float64] = safe_peak + np.log(np.exp(rows - safe_peak[:, None]).sum(axis=1))
    return result


def _top_ids(rows: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.int64]:
    """The k largest entries' ids per row, in descending order, lower ids first on ties.

    argpartition finds the k best in O(vocab); only those k are then sorted. Ties at the k-th
    value are broken towards lower ids so that two servers report the same alternatives."""
    vocab = rows.shape[1]
    if k == vocab:
        order: npt.NDArray[np.int64] = np.lexsort((np.broadcast_to(np.arange(vocab), rows.shape), -rows), axis=1)
        return order.astype(np.int64)
    kth = -np.partition(-rows, k - 1, axis=1)[:, k - 1]
    result = np.empty((rows.shape[0], k), dtype=np.int64)
    for i, row in enumerate(rows):
        # Entries above the k-th value are certain; the rest come from the tied ones, by id.
        above = np.flatnonzero(row > kth[i])
        tied = np.flatnonzero(row == kth[i])[: k - above.size]
        picked = np.concatenate([above, tied])
        if picked.size < k:  # NaN logits compare false everywhere: a model bug, listed as is
            picked = np.arange(k)
        result[i] = picked[np.lexsort((picked, -row[picked]))]
    return result


def _floored(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """-inf and anything below the floor as LOGPROB_FLOOR; NaN stays NaN (a model bug, visible)."""
    return np.maximum(values, LOGPROB_FLOOR)


@dataclass(slots=True)
class LogprobRun:
    """A growing run of tokens' log-probabilities (one sequence's), read back in slices.

    Lists, appended to in place: a reply of n tokens costs O(n) in all, where joining frozen
    runs token by token would copy O(n^2)."""

    num_top: int
    token_logprobs: list[float] = field(default_factory=list)
    top_token_ids: list[int] = field(default_factory=list)
    top_logprobs: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.token_logprobs)

    def extend(self, run: TokenLogprobs) -> None:
        self.token_logprobs.extend(run.token_logprobs)
        self.top_token_ids.extend(run.top_token_ids)
        self.top_logprobs.extend(run.top_logprobs)

    def since(self, start: int) -> TokenLogprobs:
        """Tokens [start, end) as a frozen run."""
        k = self.num_top
        return TokenLogprobs(
            tuple(self.token_logprobs[start:]),
            tuple(self.top_token_ids[start * k :]),
            tuple(self.top_logprobs[start * k :]),
            k,
        )
