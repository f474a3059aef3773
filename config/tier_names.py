"""The names of the four levels of service, defined once (what they mean: contracts/service_tier.py).

Here, in the lowest layer, so that switchyard.yaml's entitlements (`teams.<team>.tiers`) and
every layer above name the same values."""

from __future__ import annotations

from typing import Literal

# OpenAI's names (`service_tier`), highest first.
ServiceTier = Literal["priority", "default", "flex", "batch"]
# The same tiers as classes (`/v1/generate`'s `class`, the servers' `request_class`), in the same order.
RequestClass = Literal["priority", "interactive", "flex", "bulk"]
