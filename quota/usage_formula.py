"""What one ended request used, from its token counts and its times: the `UsageRecord` the
gateway meters (through `serving/metering.py`) at the request's end.

KV token-seconds is the KV cache memory a request held, integrated over its life: tokens held ×
seconds held. The prompt's tokens are held from admission to the end; the reply grows from 0 to
`completion_tokens` between the first token and the end, so on average half of its tokens are
held for that stretch:

    started_at            first_token_at              ended_at
        |─────────────────────────|──────────────────────────|
        prompt_tokens held ──────────────────────────────────▶   prompt × (ended − started)
                                  completion: 0 ─────▶ n         n × (ended − first) / 2

A request that ended before its first token held its prompt only; a clock that ran backwards
(it does not, but the times come from outside) counts no time rather than negative time.
"""

from __future__ import annotations

from quota.usage import UsageRecord


def kv_token_seconds(
    prompt_tokens: int,
    completion_tokens: int,
    *,
    started_at: float,
    first_token_at: float | None,
    ended_at: float,
) -> float:
    """KV tokens held × seconds held by a request admitted at `started_at` that produced its
    first token at `first_token_at` (None: never) and ended at `ended_at`, all seconds on one
    clock: the prompt for the whole request, the completion on average half of it from the
    first token on."""
    held_prompt = prompt_tokens * max(0.0, ended_at - started_at)
    first = first_token_at if first_token_at is not None else ended_at
    held_completion = completion_tokens * max(0.0, ended_at - first) / 2
    return held_prompt + held_completion


def request_usage(
    *,
    team_id: str,
    model_id: str,
    request_class: str,
    prompt_tokens: int,
    cached_tokens: int,
    completion_tokens: int,
    discarded_tokens: int,
    cancelled: bool,
    started_at: float,
    first_token_at: float | None,
    ended_at: float,
    record_id: str | None,
    delivered: bool = True,
) -> UsageRecord:
    """The usage record of one ended request, counted as the engine reported it.

    `cached_tokens` is capped at `prompt_tokens`: the cached tokens are a part of the prompt
    (`UsageRecord` refuses more), whatever a server reported. `record_id` names the request's one
    generation, so a record sent again counts once (the gateway uses its lease's id).

    `delivered` False: the reply reached no one (a whole reply that failed): its tokens were
    the engine's work, metered as discarded and not billed, and its KV was held all the same."""
    return UsageRecord(
        team_id=team_id,
        model_id=model_id,
        request_class=request_class,
        prompt_tokens=prompt_tokens,
        cached_tokens=min(cached_tokens, prompt_tokens),
        completion_tokens=completion_tokens if delivered else 0,
        discarded_tokens=discarded_tokens if delivered else discarded_tokens + completion_tokens,
        cancelled=cancelled,
        kv_token_seconds=kv_token_seconds(
            prompt_tokens, completion_tokens, started_at=started_at, first_token_at=first_token_at, ended_at=ended_at
        ),
        record_id=record_id,
    )
