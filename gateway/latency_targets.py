"""Per-request latency targets from the headers llm-d names them by (docs/tiers.md):

    x-slo-ttft-ms: MS    the first token within MS of arrival
    x-slo-tpot-ms: MS    then at most MS between tokens

Each a whole number of ms from 1 to an hour (`MAX_SLO_MS`), else a 400 naming the header
(`header.x-slo-ttft-ms`, as FastAPI names a header).
`/v1/generate` also takes them as body fields (`slo_ttft_ms`, `slo_tpot_ms`); a body's field
wins over its header. The TTFT target reaches the router (a server that meets it) and the
server (earliest deadline first within a class); the TPOT target is reported against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header

from contracts.schemas import MAX_SLO_MS

TTFT_HEADER = "x-slo-ttft-ms"
TPOT_HEADER = "x-slo-tpot-ms"
# Checked by FastAPI against the same bounds the document states (a 400 naming the header).
TargetHeader = Annotated[int | None, Header(ge=1, le=MAX_SLO_MS)]


@dataclass(frozen=True, slots=True)
class LatencyTargets:
    """A request's targets in ms; None: none given."""

    ttft_ms: int | None = None
    tpot_ms: int | None = None


async def latency_target_headers(
    x_slo_ttft_ms: TargetHeader = None, x_slo_tpot_ms: TargetHeader = None
) -> LatencyTargets:
    return LatencyTargets(x_slo_ttft_ms, x_slo_tpot_ms)


SloHeaders = Annotated[LatencyTargets, Depends(latency_target_headers)]
