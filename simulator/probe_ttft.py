"""The fast mode's first tokens: the latest probe's, per class, and the traffic served at them.

A request admitted without waiting gets its first token as the probe's requests of its class
did; the traffic is counted per (class, hour, in the focus window) and folded in at the probe's
histograms, weighted, when the next probe comes (`use`). One that waited at the gateway gets the
wait plus a draw from the probe's samples of its class (`waited`). A class the probe served no
request of borrows every class's samples.

    probe ─▶ per class: every prompt / chat-sized / beyond the read ─▶ Recorder
                                                (the class's own; the headline for priority and
                                                interactive; the focus window's)
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace

from autoscaler.demand_classes import DEMAND_CLASSES
from contracts.service_tier import RequestClass
from simulator.probe import ProbeResult
from simulator.recorder import Recorder, TtftHistograms, TtftSample
from simulator.sim_request import SHAPED_CLASSES

HOUR = 3600.0
_PendingKey = tuple[RequestClass, int, bool]  # class, hour of arrival, within the focus window


class ProbeTtft:
    """The latest probe's first tokens, and the traffic served at them since (module docstring)."""

    def __init__(self, recorder: Recorder, rng: random.Random) -> None:
        self.recorder = recorder
        self.rng = rng
        self.probe: ProbeResult | None = None
        self.samples: dict[RequestClass, list[TtftSample]] = {}
        self.by_class: dict[RequestClass, TtftHistograms] = {}
        self.demand = TtftHistograms()  # priority and interactive together: the autoscaler's signal
        self.pending: dict[_PendingKey, float] = defaultdict(float)

    def served(self, request_class: RequestClass, arrived: float, count: float) -> None:
        """`count` requests admitted without waiting: at the probe's first tokens."""
        self.pending[(request_class, self._hour(arrived), self._in_focus(arrived))] += count

    def waited(self, request_class: RequestClass, arrived: float, wait_s: float, count: int) -> None:
        """`count` requests admitted after `wait_s` at the gateway: the wait plus a few draws."""
        samples = self.samples.get(request_class, [])
        if not samples:
            self.recorder.first_token(arrived, TtftSample(wait_s, True, wait_s, request_class), count)
            return
        draws = min(count, 4)
        for _ in range(draws):
            self.recorder.first_token(arrived, self.rng.choice(samples).later(wait_s), count / draws)

    def use(self, probe: ProbeResult) -> None:
        """Fold the traffic served since the last probe in at that probe's latencies, then take
        the new probe's."""
        self.fold()
        self.probe = probe
        everyone = probe.ttft_samples
        self.samples = {}
        for request_class in SHAPED_CLASSES:
            own = [s for s in everyone if s.request_class == request_class]
            self.samples[request_class] = own or [replace(s, request_class=request_class) for s in everyone]
        self.by_class = {c: TtftHistograms() for c in SHAPED_CLASSES}
        self.demand = TtftHistograms()
        for request_class, samples in self.samples.items():
            histograms = self.by_class[request_class]
            for sample in samples:
                histograms.add(sample)
        for sample in everyone:
            if sample.request_class in DEMAND_CLASSES:
                self.demand.add(sample)

    def fold(self) -> None:
        """The traffic served since the last probe, into the recorder at its histograms."""
        rec = self.recorder
        for (request_class, hour, focus), served in self.pending.items():
            histograms = self.by_class.get(request_class)
            if not served or histograms is None or not histograms.every.total:
                continue
            every, chat = histograms.every, histograms.chat
            weight = served / every.total
            rec.class_ttft[request_class][hour].merge(histograms, weight)
            if focus:
                rec.focus_ttft[request_class].merge(histograms, weight)
            if request_class not in DEMAND_CLASSES:
                continue
            rec.ttft[hour].merge(every, weight)
            rec.ttft_beyond_read[hour].merge(histograms.beyond_read, weight)
            if chat.total:
                rec.ttft_chat[hour].merge(chat, served * (chat.total / every.total) / chat.total)
        self.pending.clear()

    def _hour(self, t: float) -> int:
        return min(int(t // HOUR), self.recorder.num_hours - 1)

    def _in_focus(self, t: float) -> bool:
        focus = self.recorder.focus_s
        return focus is not None and focus[0] <= t < focus[1]
