"""A reply's deltas as they are kept in Redis: in a request's final record (what a repeat of its
id replays, and what a retry of a failed generation resumes from) and in the deltas stream
other processes follow.

    delta  ──delta_record──▶  [text, token_ids]                      (no log-probabilities)
                              [text, token_ids, {"logprobs": L}]     (L: Logprobs as lists)
           ◀─delta_from_record──

A resumed or replayed reply keeps the log-probabilities of the tokens it carries, so a reply
that asked for them has one per token however many generations wrote it. A record written
before they were kept (two items) still reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contracts.generation import GenerationDelta, Logprobs


def logprobs_record(logprobs: Logprobs) -> dict[str, list[Any]]:
    return {
        "token_logprobs": list(logprobs.token_logprobs),
        "top_token_ids": list(logprobs.top_token_ids),
        "top_logprobs": list(logprobs.top_logprobs),
    }


def logprobs_from_record(record: Mapping[str, Sequence[Any]]) -> Logprobs:
    return Logprobs(
        token_logprobs=tuple(float(v) for v in record["token_logprobs"]),
        top_token_ids=tuple(int(v) for v in record.get("top_token_ids", ())),
        top_logprobs=tuple(float(v) for v in record.get("top_logprobs", ())),
    )


def delta_record(delta: GenerationDelta) -> list[Any]:
    """What is kept of `delta`: its text, its token ids and, when it has them, their log-probabilities."""
    if delta.logprobs is None:
        return [delta.text, list(delta.token_ids)]
    return [delta.text, list(delta.token_ids), {"logprobs": logprobs_record(delta.logprobs)}]


def delta_from_record(record: Sequence[Any]) -> GenerationDelta:
    """The delta `delta_record` kept."""
    text, token_ids = record[0], tuple(record[1])
    extra: Mapping[str, Any] = record[2] if len(record) > 2 else {}
    logprobs = extra.get("logprobs")
    return GenerationDelta(text, token_ids, logprobs=None if logprobs is None else logprobs_from_record(logprobs))
