"""A batch's progress as text, for the CLI and the status API.

    [██████████████▒▒░░░░░░░░░░░░░░] 53%
     done          failed/expired   not finished yet

The percentage counts every finished entry (done, failed or expired), since that is what tells
how long the batch still runs; the bar shows how many of them succeeded.
"""

from __future__ import annotations

import math

from bulk.deadlines import format_duration

DONE_GLYPH = "█"
FAILED_GLYPH = "▒"  # failed or expired: finished, without a result
PENDING_GLYPH = "░"
UNKNOWN_ETA = "–"


def progress_bar(done: int, failed: int, expired: int, total: int, width: int = 30) -> str:
    """`[███▒░░] 52%`: done, then failed or expired, then pending cells; the percent of finished
    entries, rounded down so 100% means every entry finished. An empty batch is complete."""
    if min(done, failed, expired, total) < 0:
        raise ValueError(f"counts must not be negative: {done=} {failed=} {expired=} {total=}")
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    finished = done + failed + expired
    if finished > total:
        raise ValueError(f"finished entries ({finished}) exceed the batch's {total}")
    if total == 0:
        return f"[{DONE_GLYPH * width}] 100%"
    # Cells from the cumulative counts, so the three runs always add up to the width exactly.
    done_cells = done * width // total
    finished_cells = finished * width // total
    bar = (
        DONE_GLYPH * done_cells
        + FAILED_GLYPH * (finished_cells - done_cells)
        + PENDING_GLYPH * (width - finished_cells)
    )
    return f"[{bar}] {finished * 100 // total}%"


def eta_text(eta_s: float | None) -> str:
    """A short time to go (`42s`, `3m 10s`, `1h 05m`, `1d 02h`: `format_duration`), or `–`
    when there is no estimate. Rounded up, so `0s` only when nothing is left."""
    if eta_s is None or not math.isfinite(eta_s):
        return UNKNOWN_ETA
    return format_duration(eta_s)
