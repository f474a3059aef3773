"""The partition run's faults: links cut, never processes killed. Each is held, then healed,
and recorded in the history (`History.fault`) with its window (`FaultWindow`).

    server-link     a server host's link down (its streams go quiet mid-reply), then up
    gateway-redis   a gateway host cut from every Redis host and the sentinels (the rest of
                    its links work: it still reaches servers and clients), then healed
    split-brain     the Redis primary's host cut from the other Redis hosts and the sentinels,
                    the gateways still reaching it; held until the sentinels promote a
                    replica, then healed (the old primary rejoins as a replica)
    control-link    the control host's link down (the dispatcher goes dark), then up
    flap            a link down and up every FLAP_PERIOD_S for the hold

Kinds come in seeded rounds (every kind once per round, shuffled), targets in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass

from faults.chaos_history import History
from faults.partition_stack import (
    CONTROL_HOST,
    GATEWAY_HOSTS,
    REDIS_HOSTS,
    SENTINEL_HOST,
    SERVER_HOSTS,
    PartitionStack,
)
from server_host.process import wait_until

KINDS = ("server-link", "gateway-redis", "split-brain", "control-link", "flap")
FLAP_PERIOD_S = 2.0
PROMOTION_TIMEOUT_S = 40.0
REJOIN_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """One fault from its start to its heal (history times)."""

    kind: str
    target: str
    at: float
    healed: float
    detail: str = ""


class PartitionFaults:
    """Injects a seeded schedule of link faults on `stack`'s network."""

    def __init__(self, stack: PartitionStack, history: History, seed: int, hold_s: float) -> None:
        self._stack = stack
        self._net = stack.net
        self._history = history
        self._rng = random.Random(seed)
        self._hold_s = hold_s
        self.windows: list[FaultWindow] = []
        self.errors: list[str] = []

    def schedule(self, count: int) -> list[tuple[str, str]]:
        """`count` (kind, target) pairs: rounds of every kind, shuffled."""
        turn = {
            "server-link": list(SERVER_HOSTS),
            "gateway-redis": list(GATEWAY_HOSTS),
            "flap": [*SERVER_HOSTS, *GATEWAY_HOSTS],
            "control-link": [CONTROL_HOST],
            "split-brain": ["primary"],
        }
        picked: list[tuple[str, str]] = []
        while len(picked) < count:
            kinds = list(KINDS)
            self._rng.shuffle(kinds)
            for kind in kinds:
                targets = turn[kind]
                picked.append((kind, targets[sum(k == kind for k, _ in picked) % len(targets)]))
        return picked[:count]

    async def run(self, schedule: list[tuple[str, str]], interval_s: float, stop: asyncio.Event) -> None:
        """Fault i starts `(i + 1) * interval_s` after the call (or as soon as fault i - 1 is
        healed, when that one ran over), until the schedule is done or `stop`."""
        began = time.monotonic()
        for i, (kind, target) in enumerate(schedule):
            wait_s = began + (i + 1) * interval_s - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, wait_s))
            if stop.is_set():
                return
            try:
                await asyncio.to_thread(self.inject, kind, target)
            except Exception as exc:  # the run goes on: the error is reported
                self._net.heal_all()
                self.errors.append(f"{kind} {target}: {exc!r}")

    def inject(self, kind: str, target: str) -> FaultWindow:
        inject = {"server-link": self._link, "control-link": self._link, "gateway-redis": self._gateway_redis,
                  "split-brain": self._split_brain, "flap": self._flap}[kind]  # fmt: skip
        at = self._history.now()
        detail = inject(target)
        window = FaultWindow(kind, target if kind != "split-brain" else detail.split(" ", 1)[0], at,
                             self._history.now(), detail)  # fmt: skip
        self._history.fault(kind, window.target, detail, at=at)
        self.windows.append(window)
        return window

    def _link(self, role: str) -> str:
        self._net[role].cut()
        time.sleep(self._hold_s)
        self._net[role].restore()
        return f"link down {self._hold_s:.0f} s"

    def _gateway_redis(self, role: str) -> str:
        others = (*REDIS_HOSTS, SENTINEL_HOST)
        self._net.cut_between([role], others)
        time.sleep(self._hold_s)
        self._net.heal_between([role], others)
        return f"cut from {', '.join(others)} {self._hold_s:.0f} s"

    def _split_brain(self, _: str) -> str:
        stack = self._stack
        old = stack.primary_role()
        if old is None:
            raise RuntimeError("the sentinels agree on no primary: no split brain to make")
        others = [*(r for r in REDIS_HOSTS if r != old), SENTINEL_HOST]
        started = time.monotonic()
        self._net.cut_between([old], others)
        promoted = wait_until(lambda: stack.primary_role() not in (None, old), PROMOTION_TIMEOUT_S, 0.5)
        promoted_s = time.monotonic() - started
        time.sleep(2.0)  # both sides take writes meant for "the primary" for a moment
        self._net.heal_between([old], others)
        new = stack.primary_role()
        rejoined = wait_until(lambda: self._is_replica(old), REJOIN_TIMEOUT_S, 0.5)
        outcome = f"{new} promoted after {promoted_s:.1f} s" if promoted else "no promotion"
        back = "old primary back as a replica" if rejoined else "old primary NOT back as a replica"
        return f"{old} cut from {', '.join(others)}; {outcome}; {back}"

    def _is_replica(self, role: str) -> bool:
        node = next(n for n in self._stack.replicas.nodes if n.host == self._net[role].address)
        return node.role() == "slave"

    def _flap(self, role: str) -> str:
        flips, deadline = 0, time.monotonic() + self._hold_s
        while time.monotonic() < deadline:
            self._net[role].cut()
            time.sleep(FLAP_PERIOD_S)
            self._net[role].restore()
            time.sleep(FLAP_PERIOD_S)
            flips += 1
        return f"down/up every {FLAP_PERIOD_S:.0f} s, {flips} times"
