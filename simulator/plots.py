"""The report's figures (matplotlib, headless): one line per policy on shared axes, so the
policies read side by side over the day."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from simulator.latency_plot import write_latency
from simulator.recorder import FleetSample
from simulator.runner import PolicyRun
from simulator.scenario import HOUR


def _hours(samples: Sequence[FleetSample]) -> list[float]:
    return [s.t / HOUR for s in samples]


def _series(
    runs: Sequence[PolicyRun], path: Path, title: str, ylabel: str, value: Callable[[FleetSample], float]
) -> Path:
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for run in runs:
        samples = run.recorder.samples
        ax.plot(_hours(samples), [value(s) for s in samples], label=run.name, linewidth=1.2)
    ax.set_title(title)
    ax.set_xlabel("hour of the day")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(runs: Sequence[PolicyRun], out_dir: Path) -> list[Path]:
    """Every figure the report links, written into `out_dir`."""
    return [
        _series(
            runs, out_dir / "servers.png", "servers serving (ready) per policy", "ready servers", lambda s: s.ready
        ),
        _series(
            runs, out_dir / "starting.png", "servers starting + draining", "servers", lambda s: s.starting + s.draining
        ),
        write_latency(runs, out_dir / "latency.png"),
        _series(runs, out_dir / "kv_used.png", "KV in use on ready servers", "fraction", lambda s: s.kv_used_fraction),
        _series(
            runs,
            out_dir / "bulk_backlog.png",
            "bulk requests not done (open batches)",
            "requests",
            lambda s: s.bulk_backlog,
        ),
        _series(
            runs,
            out_dir / "bulk_at_risk.png",
            "bulk requests in batches at risk of their deadline",
            "requests",
            lambda s: s.bulk_at_risk,
        ),
        _series(runs[:1], out_dir / "demand.png", "interactive demand", "requests/s", lambda s: s.interactive_rate),
    ]
