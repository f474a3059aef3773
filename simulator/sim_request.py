"""One request as the simulator follows it from the gateway to its last token, in one of the
four classes of contracts/service_tier.py (priority, interactive, flex, bulk)."""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.demand_classes import DEMAND_CLASSES
from contracts.service_tier import INTERACTIVE_SHAPED, REQUEST_CLASSES, RequestClass
from quota.lease_size import bulk_lease_tokens

PRIORITY: RequestClass = "priority"
INTERACTIVE: RequestClass = "interactive"  # the default tier
FLEX: RequestClass = "flex"
BULK: RequestClass = "bulk"
# The classes that arrive as a person's request (a reply streamed now), highest first.
SHAPED_CLASSES: tuple[RequestClass, ...] = tuple(c for c in REQUEST_CLASSES if c in INTERACTIVE_SHAPED)


@dataclass(slots=True, eq=False)
class SimRequest:
    """A request's lengths, team and times (seconds on the simulated clock).

    Replies run to `reply_tokens` (max_tokens = the reply's length: the simulator has no
    model to stop early), so the lease, prompt + max_tokens, is exactly what it can come to hold.
    """

    request_id: str
    team_id: str
    request_class: RequestClass  # its tier's class: who is waiting for it, and how urgently
    prompt_tokens: int
    reply_tokens: int
    arrival_s: float
    batch_id: str | None = None
    borrowed: bool = False  # admitted beyond the team's share: runs at bulk priority
    first_token_s: float | None = None
    last_token_s: float | None = None
    tokens_done: int = 0  # reply tokens delivered so far (kept across a retry)
    retries: int = 0  # servers that died under it
    server_id: str | None = None
    finished_s: float | None = None
    bulk_lease_fraction: float = 1.0  # of prompt + max_tokens a bulk request leases

    @property
    def is_bulk(self) -> bool:
        return self.request_class == BULK

    @property
    def is_demand(self) -> bool:
        """Priority or interactive: the classes with a TTFT target, whose load starts servers."""
        return self.request_class in DEMAND_CLASSES

    @property
    def lease_tokens(self) -> int:
        """What admission and the dispatcher count: the KV the request may come to hold, of
        which bulk leases `bulk_lease_fraction` (quota/lease_size.py)."""
        tokens = self.prompt_tokens + self.reply_tokens
        return bulk_lease_tokens(tokens, self.bulk_lease_fraction) if self.request_class == BULK else tokens
