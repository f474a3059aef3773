"""What a run measured: latency histograms per hour, counters, per-team tokens, GPU-seconds by
state and a time series sampled every minute. Both modes fill the same `Recorder`, so the
report and the agreement test compare like with like.

Time to first token is kept per class (priority, interactive, flex) and, for the headline
figures S6 judges, over the demand classes (priority + interactive): a flex request may wait
for room by design. `focus_s` (a surge) keeps each class's TTFT over that window apart.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from autoscaler.demand_classes import DEMAND_CLASSES
from contracts.service_tier import RequestClass
from simulator.histogram import Histogram
from simulator.scenario import HOUR
from simulator.sim_request import SHAPED_CLASSES

# Prompts up to this many tokens are "chat-sized": their TTFT is reported apart, since a
# 30,000-token document's first token waits for ~2 s of prefill whatever the fleet does.
CHAT_PROMPT_TOKENS = 8_000


@dataclass(frozen=True, slots=True)
class TtftSample:
    """One first token: its wait, whether the prompt was chat-sized (at most
    CHAT_PROMPT_TOKENS), and the wait beyond the prompt's own read on an idle server."""

    ttft_s: float
    chat: bool
    beyond_read_s: float
    request_class: RequestClass = "interactive"

    def later(self, wait_s: float) -> TtftSample:
        """The same request after `wait_s` more at the gateway."""
        return TtftSample(self.ttft_s + wait_s, self.chat, self.beyond_read_s + wait_s, self.request_class)


@dataclass(slots=True)
class TtftHistograms:
    """First tokens three ways: every prompt, chat-sized prompts, every prompt beyond its read."""

    every: Histogram = field(default_factory=Histogram)
    chat: Histogram = field(default_factory=Histogram)
    beyond_read: Histogram = field(default_factory=Histogram)

    def add(self, sample: TtftSample, weight: float = 1.0) -> None:
        self.every.add(sample.ttft_s, weight)
        self.beyond_read.add(sample.beyond_read_s, weight)
        if sample.chat:
            self.chat.add(sample.ttft_s, weight)

    def merge(self, other: TtftHistograms, weight: float = 1.0) -> None:
        """`other`'s counts, `weight` times each."""
        self.every.merge(other.every, weight)
        self.chat.merge(other.chat, weight)
        self.beyond_read.merge(other.beyond_read, weight)


@dataclass(frozen=True, slots=True)
class FleetSample:
    """The fleet at one instant (one row of the time series)."""

    t: float
    interactive_rate: float
    ready: int
    starting: int
    draining: int
    target: int
    kv_used_fraction: float
    bulk_backlog: int  # requests not yet done, every batch
    bulk_at_risk: int  # requests of batches that will not finish in time at the recent rate
    ttft_p99_s: float | None  # interactive requests that got their first token in the last minute
    # KV held by people's requests, in whole servers' worth: what the peak needs for them alone.
    interactive_servers: float = 0.0


@dataclass(slots=True)
class BatchOutcome:
    batch_id: str
    team_id: str
    count: int
    deadline_s: float  # absolute, simulated clock
    done: int = 0
    finished_s: float | None = None


class Recorder:
    """Accumulates a run's measurements; the report reads them at the end."""

    def __init__(
        self,
        hours: float,
        record_from_s: float = 0.0,
        keep_ttft_samples: bool = False,
        focus_s: tuple[float, float] | None = None,
    ) -> None:
        # Latencies before this are a warm-up (the fast mode's probes) and are not recorded.
        self.record_from_s = record_from_s
        self.focus_s = focus_s
        self.ttft_samples: list[TtftSample] | None = [] if keep_ttft_samples else None
        self.num_hours = max(1, int(hours + 0.999))
        self.ttft = [Histogram() for _ in range(self.num_hours)]  # by hour of arrival
        self.ttft_chat = [Histogram() for _ in range(self.num_hours)]  # prompts <= CHAT_PROMPT_TOKENS
        self.ttft_beyond_read = [Histogram() for _ in range(self.num_hours)]  # TTFT - the prompt's own read
        self.itl = [Histogram() for _ in range(self.num_hours)]  # by hour of the token
        # Each interactive-shaped class's TTFT by hour of arrival, and over `focus_s`.
        self.class_ttft = {c: [TtftHistograms() for _ in range(self.num_hours)] for c in SHAPED_CLASSES}
        self.focus_ttft = {c: TtftHistograms() for c in SHAPED_CLASSES}
        self.flex_wait = Histogram()  # gateway waits of flex requests admitted after waiting
        self.recent_ttft = Histogram()  # since the last sample
        self.counters: dict[str, float] = defaultdict(float)
        self.team_tokens: dict[str, float] = defaultdict(float)  # prompt + reply tokens served
        self.samples: list[FleetSample] = []
        self.batches: dict[str, BatchOutcome] = {}
        self.paid_gpu_s = 0.0  # starting + ready + draining
        self.ready_gpu_s = 0.0
        self.kv_token_s = 0.0  # KV held by requests × time
        self.kv_capacity_token_s = 0.0  # KV of every paid server × time
        self.peak_servers = 0

    def _hour(self, t: float) -> int:
        return min(max(int(t // HOUR), 0), self.num_hours - 1)

    def first_token(self, arrival_s: float, sample: TtftSample, weight: float = 1.0) -> None:
        if arrival_s < self.record_from_s:
            return
        if self.ttft_samples is not None:
            self.ttft_samples.append(sample)
        hour = self._hour(arrival_s)
        self.class_ttft[sample.request_class][hour].add(sample, weight)
        focus = self.focus_s
        if focus is not None and focus[0] <= arrival_s < focus[1]:
            self.focus_ttft[sample.request_class].add(sample, weight)
        if sample.request_class not in DEMAND_CLASSES:
            return
        self.ttft[hour].add(sample.ttft_s, weight)
        if sample.chat:
            self.ttft_chat[hour].add(sample.ttft_s, weight)
        self.ttft_beyond_read[hour].add(sample.beyond_read_s, weight)
        self.recent_ttft.add(sample.ttft_s, weight)

    def gap(self, t: float, gap_s: float, weight: float = 1.0) -> None:
        """One inter-token gap, at `t`. Called for every token of every reply in the exact mode
        (millions a probe-heavy day), hence `_hour` inlined."""
        if t < self.record_from_s:
            return
        hour = int(t // HOUR)
        self.itl[hour if 0 <= hour < self.num_hours else self._hour(t)].add(gap_s, weight)

    def count(self, name: str, amount: float = 1.0) -> None:
        self.counters[name] += amount

    def sample(self, row: FleetSample) -> None:
        self.samples.append(row)
        self.recent_ttft = Histogram()

    def ttft_over(self, start_s: float, end_s: float, *, chat: bool = False, beyond_read: bool = False) -> Histogram:
        """Time to first token of requests arriving in [start_s, end_s) (whole hours); `chat`:
        chat-sized prompts only; `beyond_read`: every prompt, less its own read time."""
        hours = self.ttft_beyond_read if beyond_read else self.ttft_chat if chat else self.ttft
        merged = Histogram()
        for hour in range(self._hour(start_s), self._hour(end_s - 1e-9) + 1):
            merged.merge(hours[hour])
        return merged

    def class_ttft_over(self, request_class: RequestClass, start_s: float, end_s: float) -> TtftHistograms:
        """One class's time to first token of requests arriving in [start_s, end_s) (whole hours)."""
        merged = TtftHistograms()
        for hour in range(self._hour(start_s), self._hour(end_s - 1e-9) + 1):
            merged.merge(self.class_ttft[request_class][hour])
        return merged

    def itl_over(self, start_s: float, end_s: float) -> Histogram:
        merged = Histogram()
        for hour in range(self._hour(start_s), self._hour(end_s - 1e-9) + 1):
            merged.merge(self.itl[hour])
        return merged
