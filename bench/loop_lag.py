"""Event-loop lag of a gateway worker, measured inside it by a bench-only task.

The gateway exports no loop-lag metric (serving/metrics.py), and a probe from outside (the
latency of /healthz) cannot say which worker answered. So the bench's gateway
(bench/paced_gateway.py) runs this probe in every worker's loop: it asks to sleep `PERIOD_S`
and records how late it woke, one line per wake-up in `lag-<pid>.txt`:

    <wall clock s> <lag s>

A callback that holds the loop for 80 ms delays the next wake-up by up to 80 ms, so the
lag's percentiles over a window are how long a ready request waited for the loop then.
`lags_by_pid` reads every worker's file back for a window of wall-clock time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

PERIOD_S = 0.05
FLUSH_EVERY = 20  # lines: about once a second


async def record_lag(folder: Path) -> None:
    """Record this process's loop lag under `folder` until cancelled."""
    loop = asyncio.get_running_loop()
    path = folder / f"lag-{os.getpid()}.txt"
    with path.open("a", encoding="ascii") as out:
        lines: list[str] = []
        try:
            while True:
                asked = loop.time() + PERIOD_S
                await asyncio.sleep(PERIOD_S)
                lines.append(f"{time.time():.3f} {max(0.0, loop.time() - asked):.5f}\n")
                if len(lines) >= FLUSH_EVERY:
                    out.writelines(lines)
                    out.flush()
                    lines.clear()
        finally:
            out.writelines(lines)


@contextlib.asynccontextmanager
async def lag_recorded(folder: Path) -> AsyncIterator[None]:
    """Run `record_lag` for the block (a worker's lifespan)."""
    task = asyncio.create_task(record_lag(folder), name="bench-loop-lag")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def lags_by_pid(folder: Path, since: float, until: float) -> dict[int, list[float]]:
    """Each worker's lags (s) recorded between the wall-clock times `since` and `until`."""
    lags: dict[int, list[float]] = {}
    for path in sorted(folder.glob("lag-*.txt")):
        pid = int(path.stem.removeprefix("lag-"))
        window = lags.setdefault(pid, [])
        for line in path.read_text(encoding="ascii").splitlines():
            stamp, _, lag = line.partition(" ")
            if lag and since <= float(stamp) <= until:
                window.append(float(lag))
    return lags
