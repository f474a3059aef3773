"""How many KV tokens a request leases.

People's requests lease everything they may come to hold, prompt + max_tokens: admitted, they
never wait for memory and are never preempted. A reply grows a token a step, so over its life
a request holds less than that (~0.9 of it at the brief's lengths: the prompt, then the reply
so far), and a pool kept full of such leases holds that much less KV than it has.

Bulk may lease a fraction of its prompt + max_tokens instead (`bulk.lease_fraction`): the
pool's bulk is then counted at about what it holds rather than what it could. On the step a
server's requests outgrow its KV, the engine preempts bulk (newest first, by recompute: the
request reads its tokens again later), never an interactive request, so nothing fails and
people are not slowed; bulk pays with the tokens it reads twice. With many requests on a server
their sum varies little and that is rare; with a few (a CPU server) it is not, so the default
is 1: no overcommit.

The gateway leases with this and the dispatcher counts what it releases with it, so the two
agree on every entry; the simulator uses the same function.
"""

from __future__ import annotations

import math
from fractions import Fraction


def bulk_lease_tokens(tokens: int, fraction: float) -> int:
    """The lease of a bulk request that may come to hold `tokens` (prompt + max_tokens).

    `fraction` is taken as written (0.9 is nine tenths, not the nearest double), rounded up,
    and at least one token."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"the bulk lease fraction must be in (0, 1], got {fraction}")
    if tokens <= 0:
        raise ValueError(f"a request leases at least one token, got {tokens}")
    return max(1, math.ceil(tokens * Fraction(repr(fraction))))
