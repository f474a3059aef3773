"""The figures a run comes to, and the S6 targets judged on them.

Busy GPU-hours are counted in KV, the platform's own unit of cost (usage meters KV
token-seconds): busy = KV held by requests × time / KV of every server paid for × time.
Starting and draining servers are paid for and hold little, so they count against it.

People's figures (TTFT, 429 + 503) are the demand classes' (priority + interactive); each
class's TTFT, over the day and through the scenario's surge, and what flex absorbed (its waits
and 429s) are reported beside them (`ClassFigures`, `FlexFigures`).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.demand_classes import DEMAND_CLASSES
from contracts.service_tier import RequestClass
from simulator.recorder import Recorder
from simulator.scenario import HOUR, Scenario

RAMP = (7 * HOUR, 10 * HOUR)  # the morning ramp S6 judges time to first token over
TTFT_TARGET_S = 1.0
BUSY_TARGET = 0.85
BRIEF_PEAK_GPUS = 290


@dataclass(frozen=True, slots=True)
class ClassFigures:
    """One class of people's requests: how many came, their TTFT over the day and through the
    surge (None: no surge, or no request of the class in it)."""

    request_class: RequestClass
    arrived: int
    refused_or_503: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    surge_ttft_p99_s: float | None  # every prompt
    surge_chat_ttft_p99_s: float | None  # chat-sized prompts
    surge_beyond_read_p99_s: float | None  # every prompt, less its own read on an idle server


@dataclass(frozen=True, slots=True)
class FlexFigures:
    """What flex absorbed: admitted at once, after a wait (and the wait's p99), or refused with
    a 429 after its bounded wait; requests whose KV a higher tier took (exact mode)."""

    arrived: int
    waited: int
    wait_p99_s: float | None
    refused: int  # 429 flex_capacity_unavailable
    preempted: int


@dataclass(frozen=True, slots=True)
class Summary:
    policy: str
    wall_s: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    ramp_ttft_p99_s: float | None  # None: the run does not cover the ramp
    ramp_chat_ttft_p99_s: float | None  # chat-sized prompts only (no 30,000-token documents)
    ramp_beyond_read_p99_s: float | None  # every prompt, less its own read on an idle server
    itl_p50_s: float | None
    itl_p99_s: float | None
    peak_gpus: int
    peak_interactive_gpus: float  # KV people's requests held at the peak, in servers' worth
    paid_gpu_hours: float
    busy_fraction: float
    bulk_requests: int  # in batches whose deadline fell within the run
    bulk_done_in_time: int
    batches_due: int
    batches_met: int
    batches_open: int  # deadline after the run's end, not finished yet
    bulk_open_left: int
    interactive_arrived: int
    interactive_refused: int
    interactive_timed_out: int
    failures: int
    retried: int
    team_shares: dict[str, float]
    classes: tuple[ClassFigures, ...] = ()  # people's classes in the scenario's mix
    flex: FlexFigures | None = None  # None: the scenario sends no flex
    surge_s: tuple[float, float] | None = None

    @property
    def tiered(self) -> bool:
        return len(self.classes) > 1 or self.surge_s is not None

    @property
    def ramp_met(self) -> bool | None:
        return None if self.ramp_ttft_p99_s is None else self.ramp_ttft_p99_s <= TTFT_TARGET_S

    @property
    def ramp_met_beyond_reads(self) -> bool | None:
        """Chat-sized prompts within the target, and every prompt within it beyond its own read
        (a 30,000-token document's read alone takes ~1.9 s on the brief's GPU)."""
        if self.ramp_chat_ttft_p99_s is None or self.ramp_beyond_read_p99_s is None:
            return None
        return max(self.ramp_chat_ttft_p99_s, self.ramp_beyond_read_p99_s) <= TTFT_TARGET_S

    @property
    def bulk_met(self) -> bool | None:
        """None when no batch fell due within the run (nothing to judge)."""
        return None if self.batches_due == 0 else self.batches_met == self.batches_due

    @property
    def busy_met(self) -> bool:
        return self.busy_fraction >= BUSY_TARGET

    def row(self) -> dict[str, object]:
        """The headline row (bench/results/sim_<scenario>.json, the report's first table)."""
        return {
            "policy": self.policy,
            "ttft_p99_ramp_s": self.ramp_ttft_p99_s,
            "ttft_p99_ramp_chat_s": self.ramp_chat_ttft_p99_s,
            "ttft_p99_ramp_beyond_read_s": self.ramp_beyond_read_p99_s,
            "ttft_p50_s": self.ttft_p50_s,
            "ttft_p99_s": self.ttft_p99_s,
            "itl_p99_s": self.itl_p99_s,
            "peak_gpus": self.peak_gpus,
            "peak_interactive_kv_gpus": round(self.peak_interactive_gpus, 1),
            "gpu_hours": round(self.paid_gpu_hours, 1),
            "busy": round(self.busy_fraction, 3),
            "batches_met": f"{self.batches_met}/{self.batches_due}",
            "batches_open": self.batches_open,
            "refused_or_503": self.interactive_refused + self.interactive_timed_out,
            **self._tier_columns(),
            "wall_s": round(self.wall_s, 1),
        }

    def _tier_columns(self) -> dict[str, object]:
        """Each class's TTFT p99 through the surge and what flex absorbed (tiered runs only)."""
        if not self.tiered:
            return {}
        columns: dict[str, object] = {}
        for c in self.classes:
            p99s = (c.surge_ttft_p99_s, c.surge_chat_ttft_p99_s, c.surge_beyond_read_p99_s)
            columns[f"surge_ttft_p99_{c.request_class}_s"] = "/".join("-" if p is None else f"{p:.2f}" for p in p99s)
        if self.flex is not None:
            columns |= {"flex_waited": self.flex.waited, "flex_429": self.flex.refused}
        return columns


def summarize(policy: str, recorder: Recorder, scenario: Scenario, wall_s: float) -> Summary:
    end = scenario.duration_s
    ttft = recorder.ttft_over(0.0, end)
    itl = recorder.itl_over(0.0, end)
    covers_ramp = end >= RAMP[1]
    ramp = recorder.ttft_over(*RAMP) if covers_ramp else None
    ramp_chat = recorder.ttft_over(*RAMP, chat=True) if covers_ramp else None
    ramp_beyond = recorder.ttft_over(*RAMP, beyond_read=True) if covers_ramp else None
    due = [b for b in recorder.batches.values() if b.deadline_s <= end]
    open_ = [b for b in recorder.batches.values() if b.deadline_s > end and b.finished_s is None]
    met = [b for b in due if b.finished_s is not None and b.finished_s <= b.deadline_s]
    total_tokens = sum(recorder.team_tokens.values()) or 1.0
    counters = recorder.counters
    busy = recorder.kv_token_s / recorder.kv_capacity_token_s if recorder.kv_capacity_token_s else 0.0
    return Summary(
        policy=policy,
        wall_s=wall_s,
        ttft_p50_s=ttft.percentile(0.5),
        ttft_p99_s=ttft.percentile(0.99),
        ramp_ttft_p99_s=ramp.percentile(0.99) if ramp is not None else None,
        ramp_chat_ttft_p99_s=ramp_chat.percentile(0.99) if ramp_chat is not None else None,
        ramp_beyond_read_p99_s=ramp_beyond.percentile(0.99) if ramp_beyond is not None else None,
        itl_p50_s=itl.percentile(0.5),
        itl_p99_s=itl.percentile(0.99),
        peak_gpus=recorder.peak_servers,
        peak_interactive_gpus=max((row.interactive_servers for row in recorder.samples), default=0.0),
        paid_gpu_hours=recorder.paid_gpu_s / HOUR,
        busy_fraction=busy,
        bulk_requests=sum(b.count for b in due),
        bulk_done_in_time=sum(b.count for b in met),
        batches_due=len(due),
        batches_met=len(met),
        batches_open=len(open_),
        bulk_open_left=sum(b.count - b.done for b in open_),
        interactive_arrived=round(sum(counters[f"{c}_arrived"] for c in DEMAND_CLASSES)),
        interactive_refused=round(sum(counters[f"{c}_refused"] for c in DEMAND_CLASSES)),
        interactive_timed_out=round(sum(counters[f"{c}_timed_out"] for c in DEMAND_CLASSES)),
        failures=round(counters["failures"]),
        retried=round(counters["retried"]),
        team_shares={team: tokens / total_tokens for team, tokens in sorted(recorder.team_tokens.items())},
        classes=tuple(class_figures(recorder, c, end) for c, _ in scenario.class_mix),
        flex=flex_figures(recorder) if any(c == "flex" for c, _ in scenario.class_mix) else None,
        surge_s=scenario.focus_s,
    )


def class_figures(recorder: Recorder, request_class: RequestClass, end_s: float) -> ClassFigures:
    counters = recorder.counters
    day = recorder.class_ttft_over(request_class, 0.0, end_s).every
    surge = recorder.focus_ttft[request_class] if recorder.focus_s is not None else None
    return ClassFigures(
        request_class=request_class,
        arrived=round(counters[f"{request_class}_arrived"]),
        refused_or_503=round(counters[f"{request_class}_refused"] + counters[f"{request_class}_timed_out"]),
        ttft_p50_s=day.percentile(0.5),
        ttft_p99_s=day.percentile(0.99),
        surge_ttft_p99_s=surge.every.percentile(0.99) if surge is not None else None,
        surge_chat_ttft_p99_s=surge.chat.percentile(0.99) if surge is not None else None,
        surge_beyond_read_p99_s=surge.beyond_read.percentile(0.99) if surge is not None else None,
    )


def flex_figures(recorder: Recorder) -> FlexFigures:
    counters = recorder.counters
    return FlexFigures(
        arrived=round(counters["flex_arrived"]),
        waited=round(counters["flex_waited"]),
        wait_p99_s=recorder.flex_wait.percentile(0.99),
        refused=round(counters["flex_refused"]),
        preempted=round(counters["flex_preempted"]),
    )
