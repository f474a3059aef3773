"""The tiers bench's figures per tier (`bench/bench_tiers.py`): TTFT and TPOT, goodput, what was
refused, and each team's share of its tier against its weighted fair share.

Goodput is the share of the tier's requests that completed within both of the tier's targets
(a refused or failed request counts as a miss). A team's share is its part of the reply tokens
the tier served; its fair share is max-min fair by the team's weight inside the tier, over
what each team asked (a team that asks less than its weighted part gets all it asks, the rest
goes to the others by weight):

    asked  chat 100  search 300      served 200, weights 3 : 2
    fair   chat 100 (all it asked)   search 100  ->  shares 0.50 / 0.50
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from bench.live import percentile
from bench.tier_mix import TARGETS, LatencyTarget
from bench.tier_phase import RequestOutcome
from config.tier_names import ServiceTier
from contracts.service_tier import SERVICE_TIERS


def weighted_fair_shares(asked: Mapping[str, float], weights: Mapping[str, float], served: float) -> dict[str, float]:
    """Each team's fraction of `served` under max-min fairness by weight, capped at what it
    `asked` (progressive filling: the teams that ask least for their weight are filled first)."""
    if served <= 0:
        return {team: 0.0 for team in asked}
    left, weight_left = served, sum(weights[t] for t in asked)
    shares: dict[str, float] = {}
    for team in sorted(asked, key=lambda t: asked[t] / weights[t]):
        given = min(asked[team], left * weights[team] / weight_left)
        shares[team] = given / served
        left -= given
        weight_left -= weights[team]
    return shares


def met(outcome: RequestOutcome, target: LatencyTarget) -> bool:
    """Completed, with its first token and its pace within the tier's targets."""
    if not outcome.completed:
        return False
    ttft, tpot = outcome.ttft_s, outcome.tpot_s
    if target.ttft_ms is not None and (ttft is None or ttft * 1000 > target.ttft_ms):
        return False
    return target.tpot_ms is None or tpot is None or tpot * 1000 <= target.tpot_ms


def team_shares(outcomes: list[RequestOutcome], weights: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Per team of a tier's `outcomes`: `share` of the reply tokens served, and its `fair` share."""
    asked: Counter[str] = Counter()
    served: Counter[str] = Counter()
    for o in outcomes:
        asked[o.request.team] += o.request.max_tokens
        last = o.last
        served[o.request.team] += last.completion_tokens if last is not None else 0
    total = sum(served.values())
    fair = weighted_fair_shares(asked, weights, total)
    return {
        team: {"share": round(served[team] / total, 3) if total else 0.0, "fair": round(fair[team], 3)}
        for team in sorted(asked)
    }


def tier_row(tier: ServiceTier, outcomes: list[RequestOutcome], weights: Mapping[str, float]) -> dict[str, object]:
    """One row: the tier's requests as they were asked (in the baseline, sent as `default`)."""
    target = TARGETS[tier]
    ttfts = [t for o in outcomes if o.completed and (t := o.ttft_s) is not None]
    tpots = [t for o in outcomes if o.completed and (t := o.tpot_s) is not None]
    finals = Counter(r.status for o in outcomes if (r := o.final_refusal) is not None)
    shares = team_shares(outcomes, weights)
    return {
        "tier": tier,
        "sent_as": ",".join(sorted({o.sent_class for o in outcomes})),
        "requests": len(outcomes),
        "completed": sum(o.completed for o in outcomes),
        "ttft_p50_ms": round(percentile(ttfts, 50) * 1000, 1),
        "ttft_p99_ms": round(percentile(ttfts, 99) * 1000, 1),
        "tpot_p99_ms": round(percentile(tpots, 99) * 1000, 1),
        "goodput": round(sum(met(o, target) for o in outcomes) / len(outcomes), 3) if outcomes else 0.0,
        "http_429": finals.get(429, 0),
        "http_503": finals.get(503, 0),
        "other_errors": sum(n for status, n in finals.items() if status not in (429, 503))
        + sum(o.failed is not None for o in outcomes),
        "retried": sum(len(o.refusals) for o in outcomes if o.completed),
        "team_shares": " ".join(f"{t} {s['share']:.2f}/{s['fair']:.2f}" for t, s in shares.items()),
    }


def tier_rows(
    outcomes: list[RequestOutcome], tier_weights: Mapping[str, Mapping[ServiceTier, float]]
) -> list[dict[str, object]]:
    """A row per tier that had requests, highest tier first; `tier_weights`: team -> tier -> weight."""
    return [tier_row(tier, of_tier, weights) for tier, of_tier, weights in _by_tier(outcomes, tier_weights)]


def shares_by_tier(
    outcomes: list[RequestOutcome], tier_weights: Mapping[str, Mapping[ServiceTier, float]]
) -> dict[str, dict[str, dict[str, float]]]:
    """Per tier, per team: the measured share and the weighted fair share."""
    return {tier: team_shares(of_tier, weights) for tier, of_tier, weights in _by_tier(outcomes, tier_weights)}


def _by_tier(
    outcomes: list[RequestOutcome], tier_weights: Mapping[str, Mapping[ServiceTier, float]]
) -> list[tuple[ServiceTier, list[RequestOutcome], dict[str, float]]]:
    """Each tier with requests, highest first: its outcomes and the teams' weights inside it."""
    grouped = []
    for tier in SERVICE_TIERS:
        of_tier = [o for o in outcomes if o.request.tier == tier]
        if of_tier:
            grouped.append((tier, of_tier, {team: tiers.get(tier, 0.0) for team, tiers in tier_weights.items()}))
    return grouped
